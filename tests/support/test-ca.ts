/** The throw-away CA of the demo's scripted API (src/demo/test-ca.ts), which the tests use too. */
export { makeTestCa, type TestCa } from "../../src/demo/test-ca.ts";
