import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EgressRecordSchema } from "../../src/ledger/schema.ts";
import { ALLOWED, outcomes, prepareFixture, runIsolated, type ConnectSpec, type Fixture } from "./isolation-fixtures.ts";

// --isolation strict on the real engine (issue 9): the fake claude image in a network-less
// container, its only way out the runner's CONNECT proxy on a bind-mounted unix socket. The
// allowed name is mapped to a loopback echo server by the test resolver; nothing leaves the host.

let f: Fixture;
beforeAll(async () => {
  f = await prepareFixture("strict");
}, 300_000);
afterAll(() => f?.cleanup());

const PROBES: ConnectSpec[] = [
  { host: ALLOWED, port: 443, send: "hello" },
  { host: "denied.example", port: 443 },
  { host: "127.0.0.1", port: 443 },
  { host: "::1", port: 443 },
  { host: ALLOWED, port: 80 },
  // Around the proxy: there is no network to go around it with.
  { host: "192.0.2.1", port: 443, direct: true, timeoutMs: 5000 },
  { host: ALLOWED, port: 443, direct: true, timeoutMs: 5000 },
];

describe("--isolation strict", () => {
  it("reaches an allowed name through the proxy, is refused another name, a raw IP and another port, all in the egress record; nothing else of the host is in reach", async () => {
    const hostRoot = f.demo.roots.ledgerlite!;
    const behaviour = { probePaths: ["/home/agent/.claude", "/workspace/.git", "/run/study-runner-egress", hostRoot], default: { kind: "ok", connect: PROBES } };
    const run = await runIsolated(f, { isolation: "strict", behaviour, egress: { allow: [ALLOWED], resolve: f.resolve } });
    expect(run.code, run.stderr).toBe(0);
    const { ledger } = run;
    // Refused requests do not fail an attempt by themselves.
    expect(ledger.status).toBe("awaiting-adjudication");
    expect(ledger).toMatchObject({ isolation: "strict", egressAllow: [ALLOWED], runtime: (await f.runtime.ping()).defaultRuntime });
    expect(ledger.observations.map((o) => o.status)).toEqual(["completed", "completed"]);

    for (const [i, obs] of ledger.observations.entries()) {
      const seen = run.connects.get(i);
      expect(outcomes(seen, ALLOWED, 443, "proxy"), `attempt ${i}`).toEqual({ tunnel: 1 });
      expect(seen?.find((c) => c.host === ALLOWED && c.via === "proxy")?.echo).toBe("echo:hello");
      expect(outcomes(seen, "denied.example", 443)).toEqual({ "refused 403": 1 });
      expect(outcomes(seen, "127.0.0.1", 443)).toEqual({ "refused 403": 1 });
      expect(outcomes(seen, "::1", 443)).toEqual({ "refused 403": 1 });
      expect(outcomes(seen, ALLOWED, 80)).toEqual({ "refused 403": 1 });
      // No route around the proxy: no interface but loopback, no name resolution.
      expect(outcomes(seen, "192.0.2.1", 443, "direct")).toEqual({ "error ENETUNREACH": 1 });
      expect(Object.keys(outcomes(seen, ALLOWED, 443, "direct") ?? {})[0]).toMatch(/^error (EAI_AGAIN|ENOTFOUND)$/);
      const record = run.records.get(i)!;
      expect(record.networkInterfaces).toEqual(["lo"]);
      // The environment is the runner's allowlist plus the proxy variables (HOSTNAME is Docker's).
      expect(record.envNames).toEqual([
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_AUTOUPDATER",
        "HOME",
        "HOSTNAME",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "LANG",
        "NO_PROXY",
        "PATH",
        "STUDY_RUNNER_ATTEMPT",
        "TERM",
        "TMPDIR",
        "USER",
      ]);
      // A fresh HOME with the login copy only (no host CLAUDE.md, no memory), no .git, no host checkout,
      // and the proxy's socket alone in its folder.
      expect(record.listings["/home/agent/.claude"]).toEqual({ entries: [".credentials.json"] });
      expect(record.listings["/workspace/.git"]).toEqual({ error: "ENOENT" });
      expect(record.listings[hostRoot]).toEqual({ error: "ENOENT" });
      expect(record.listings["/run/study-runner-egress"]).toEqual({ entries: ["egress.sock"] });

      const egress = obs.egress!;
      expect(EgressRecordSchema.parse(egress)).toEqual(egress);
      expect(egress).toMatchObject({ requests: 5, allowed: 1, refused: 4, bytesUp: 5, bytesDown: 10, entriesDropped: 0, droppedConnections: 0 });
      expect(egress.entries.map((e) => [e.host, e.port, e.allowed])).toEqual([
        [ALLOWED, 443, true],
        ["denied.example", 443, false],
        ["127.0.0.1", 443, false],
        ["::1", 443, false],
        [ALLOWED, 80, false],
      ]);
      expect(egress.entries[0]).toMatchObject({ bytesUp: 5, bytesDown: 10 });
      expect(egress.entries[0]!.error).toBeUndefined();
      expect(egress.entries.slice(1).map((e) => e.error)).toEqual(["not on the allowlist", expect.stringMatching(/raw IP/), expect.stringMatching(/raw IP/), "port 80 is not 443"]);
    }
    // Only the allowed name was ever resolved, and only its tunnels reached the echo server.
    expect([...new Set(f.resolved)]).toEqual([`${ALLOWED}:443`]);
    // The doc-bridge arm still reached its server (a unix socket, not the network).
    expect(ledger.observations[1]!.mcp?.connections).toBe(1);
    for (const spec of run.specs) {
      expect(spec.networkMode).toBe("none");
      expect(spec.entrypoint?.slice(1)).toEqual([
        "/opt/study-runner/with-relay.cjs",
        "--login",
        "/run/study-runner-login",
        "--proxy",
        "/run/study-runner-egress/egress.sock",
        "--",
        "/usr/local/bin/claude",
      ]);
    }
  }, 180_000);

  it("a flood of CONNECT requests in one attempt is bounded and counted, and the next attempt is unaffected", async () => {
    const behaviour = {
      attempts: {
        "0": {
          kind: "ok",
          connect: [
            { host: ALLOWED, port: 443, count: 200, concurrency: 50, holdMs: 300 },
            { host: "denied.example", port: 443, count: 400, concurrency: 100 },
          ],
        },
        "1": { kind: "ok", connect: [{ host: ALLOWED, port: 443, send: "after the flood" }] },
      },
    };
    const t0 = Date.now();
    const run = await runIsolated(f, { isolation: "strict", behaviour, egress: { allow: [ALLOWED], resolve: f.resolve, limits: { maxTunnels: 8, maxEntries: 100 } } });
    expect(run.code, run.stderr).toBe(0);
    expect(Date.now() - t0).toBeLessThan(120_000);
    const [flooded, next] = run.ledger.observations;
    expect(flooded!.status).toBe("completed");
    const fe = flooded!.egress!;
    expect(EgressRecordSchema.safeParse(fe).success).toBe(true);
    expect(fe.entries).toHaveLength(100);
    expect(fe.entriesDropped).toBe(fe.requests - 100);
    // Every flood connection ended one way or another, and what the proxy answered it counted.
    const seen = run.connects.get(0)!;
    const total = (r: Record<string, number> | undefined) => Object.values(r ?? {}).reduce((a, b) => a + b, 0);
    expect(total(outcomes(seen, ALLOWED, 443))).toBe(200);
    expect(total(outcomes(seen, "denied.example", 443))).toBe(400);
    const tunnels = outcomes(seen, ALLOWED, 443)?.tunnel ?? 0;
    expect(tunnels).toBeGreaterThan(0);
    // At most 150 connections at once, under the proxy's connection bound: every one was answered.
    expect(fe).toMatchObject({ requests: 600, allowed: tunnels, refused: 600 - tunnels, droppedConnections: 0 });
    expect(outcomes(seen, "denied.example", 443)).toEqual({ "refused 403": 400 });
    expect(outcomes(seen, ALLOWED, 443)).toEqual({ tunnel: tunnels, "refused 503": 200 - tunnels });
    expect(fe.entries.some((e) => e.error === "too many open tunnels (8)")).toBe(true);

    expect(next!.status).toBe("completed");
    expect(run.connects.get(1)?.[0]).toMatchObject({ via: "proxy", results: { tunnel: 1 }, echo: "echo:after the flood" });
    expect(next!.egress).toMatchObject({ requests: 1, allowed: 1, refused: 0, entriesDropped: 0, droppedConnections: 0 });
  }, 240_000);
});
