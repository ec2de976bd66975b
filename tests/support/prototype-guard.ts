import { afterAll } from "vitest";

/**
 * The unit tier's files share their workers (vitest.config.ts, `isolate: false`), so a test, or the
 * code it runs, that assigns through a key named "__proto__" would leave every later file of its
 * worker with inherited keys, and their failures would point elsewhere. Each file checks after its
 * tests that the prototypes every object and array inherit from gained no enumerable key and that
 * arrays still iterate; the file that broke them fails, naming what it left.
 */
afterAll(() => {
  const left: string[] = [];
  for (const key in {}) left.push(`Object.prototype.${key}`);
  for (const key in []) left.push(`Array.prototype.${key}`);
  if (typeof [][Symbol.iterator] !== "function") left.push("Array.prototype[Symbol.iterator]");
  if (left.length > 0) throw new Error(`this file left ${left.join(", ")} behind: something it ran assigned through a "__proto__" key`);
});
