import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EGRESS_RELAY_PORT } from "../../src/transport/cli/spec.ts";
import { ALLOWED, prepareFixture, runIsolated, type Fixture } from "./isolation-fixtures.ts";

// --isolation offline on the real engine (issue 9): no way out at all. The fake claude image tries
// a name, a raw address, the host's loopback echo server and the port strict's relay would use.

let f: Fixture;
beforeAll(async () => {
  f = await prepareFixture("offline");
}, 300_000);
afterAll(() => f?.cleanup());

describe("--isolation offline", () => {
  it("every attempt to connect fails, nothing reaches the host, and no egress record is kept", async () => {
    const connect = [
      { host: ALLOWED, port: 443, timeoutMs: 5000 },
      { host: "192.0.2.1", port: 443, timeoutMs: 5000 },
      { host: "127.0.0.1", port: f.echo.port, timeoutMs: 5000 },
      { host: "127.0.0.1", port: EGRESS_RELAY_PORT, timeoutMs: 5000 },
    ];
    const run = await runIsolated(f, { isolation: "offline", behaviour: { default: { kind: "ok", connect } } });
    expect(run.code, run.stderr).toBe(0);
    // No --runtime: the engine's default, recorded by name.
    expect(run.ledger).toMatchObject({ isolation: "offline", runtime: (await f.runtime.ping()).defaultRuntime, status: "awaiting-adjudication" });
    expect(run.ledger.egressAllow).toBeUndefined();
    for (const [i, obs] of run.ledger.observations.entries()) {
      expect(obs.egress, `attempt ${i}`).toBeUndefined();
      const seen = run.connects.get(i)!;
      expect(seen.map((c) => [c.host, c.via, c.count])).toEqual(connect.map((c) => [c.host, "direct", 1]));
      // Each fails at once, and for the reason "no network": no resolver, no route, an empty loopback.
      expect(seen.map((c) => Object.keys(c.results))).toEqual([[expect.stringMatching(/^error (EAI_AGAIN|ENOTFOUND)$/)], ["error ENETUNREACH"], ["error ECONNREFUSED"], ["error ECONNREFUSED"]]);
      expect(run.records.get(i)?.networkInterfaces).toEqual(["lo"]);
      expect(run.records.get(i)?.envNames).not.toContain("HTTPS_PROXY");
    }
    expect(f.echo.connections()).toBe(0);
    expect(f.resolved).toEqual([]);
    for (const spec of run.specs) {
      expect(spec.networkMode).toBe("none");
      // Only the login wrapper: no relay to a model API and no proxy.
      expect(spec.entrypoint).toEqual(["/usr/local/bin/node", "/opt/study-runner/with-relay.cjs", "--login", "/run/study-runner-login", "--", "/usr/local/bin/claude"]);
      expect(spec.mounts.map((m) => m.target)).not.toContain("/run/study-runner-egress");
    }
  }, 180_000);
});
