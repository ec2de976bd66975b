import { mkdtemp, rm } from "node:fs/promises";
import { connect, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GATEWAY_SOCKET_NAME } from "../../src/gateway/gateway.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { AHEAD_ATTEMPT } from "../../src/sandbox/engine-api.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { STREAM_LIMITS } from "../../src/sandbox/stream-mux.ts";
import {
  freshLogin,
  ledgerOf,
  preparePipeline,
  prepareRun,
  RESERVATION_USD,
  runPipeline,
  startPipeline,
  waitFor,
  waitForAttemptContainer,
  type Pipeline,
  type PreparedRun,
} from "../support/pipeline.ts";

/**
 * Faults of the engine-api channel as a run records them, through the shipped command on the
 * local engine with `--sandbox-channel engine-api` and the gateway (the channel's credentials):
 * the engine's connection cut mid-attempt, and an inside that opens more channels than the bound.
 */

let p: Pipeline;
let proxyDir: string;
beforeAll(async () => {
  p = await preparePipeline("engine-api-faults");
  // Short: a unix socket path has a 108-byte limit.
  proxyDir = await mkdtemp("/tmp/sr-ep-");
}, 300_000);
afterAll(async () => {
  await p?.cleanup();
  await rm(proxyDir, { recursive: true, force: true });
});

/** The pipeline's run on the engine-api channel with the gateway instead of the login copy. */
function overEngineApi(run: PreparedRun): PreparedRun {
  run.args = [
    ...run.args.filter((a, i, all) => a !== "--credentials" && all[i - 1] !== "--credentials").map((a, i, all) => (all[i - 1] === "--isolation" ? "standard" : a)),
    "--sandbox-channel",
    "engine-api",
  ];
  return run;
}

/**
 * The engine's socket as the runner reaches it: a unix socket of the test that forwards every
 * connection to the local engine, and can cut them all at once and refuse new ones (the engine's
 * connection lost, the engine itself untouched).
 */
class EngineProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  constructor(readonly path: string) {}
  get host(): string {
    return `unix://${this.path}`;
  }
  async open(): Promise<void> {
    this.server = createServer((c) => {
      const up = connect("/var/run/docker.sock");
      for (const s of [c, up]) {
        this.sockets.add(s);
        s.on("error", () => undefined);
        s.on("close", () => {
          this.sockets.delete(s);
          c.destroy();
          up.destroy();
        });
      }
      c.pipe(up);
      up.pipe(c);
    });
    await new Promise<void>((r) => this.server!.listen(this.path, r));
  }
  async cut(): Promise<void> {
    const closed = new Promise((r) => this.server?.close(r));
    for (const s of this.sockets) s.destroy();
    await closed;
  }
}

describe("the engine-api channel's faults, as the run records them", () => {
  // contract: R251
  it("the engine's connection cut mid-attempt: the attempt is charged, the run blocks, and the next run's reaper leaves nothing of it on the engine", async () => {
    const proxy = new EngineProxy(join(proxyDir, "engine.sock"));
    await proxy.open();
    const loginDir = await freshLogin(p);
    const env = { DOCKER_HOST: proxy.host };
    const run = overEngineApi(await prepareRun(p, { behaviour: { attempts: { "0": { kind: "sleep", seconds: 300 } } }, loginDir, env }));
    const started = startPipeline(run);
    await waitForAttemptContainer(p, started);
    const owned = { [LABELS.pid]: String(started.pid) };
    // The relay and then the attempt container run (both carry the attempt's labels), with their
    // volumes; beside them the next attempt's relay may be made ahead (contract R257).
    const attempts = async () => (await p.runtime.listByLabel(owned)).filter((c) => c.labels[LABELS.attempt] !== AHEAD_ATTEMPT);
    await waitFor("the relay and the attempt container to run", async () => ((await attempts()).filter((c) => c.running).length === 2 ? true : undefined), 60_000);
    expect((await p.runtime.listVolumesByLabel(owned)).length).toBeGreaterThan(0);
    await proxy.cut();

    const r = await started.done;
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toMatch(/Docker engine unreachable/);
    const ledger = await readLedger(run.output);
    expect(ledger.status).toBe("blocked");
    expect(ledger.statusReason).toMatch(/^attempt 1 stopped by a fault of the runner: .*Docker engine unreachable.*; the attempt was not settled and its reservation stays charged$/);
    expect(ledger.budget).toMatchObject({ reservedUsd: RESERVATION_USD, spentUsd: RESERVATION_USD });
    // What the dead runner made is still on the engine: it could not remove it.
    expect((await attempts()).length).toBe(2);

    await proxy.open();
    const next = await runPipeline(p, { loginDir, env, args: ["--credentials", "gateway", "--isolation", "standard", "--sandbox-channel", "engine-api"] });
    expect(next.code, next.stderr).toBe(0);
    expect(await p.runtime.listByLabel(owned)).toEqual([]);
    expect(await p.runtime.listVolumesByLabel(owned)).toEqual([]);
    await proxy.cut();
  }, 300_000);

  // contract: R242
  it("an inside that opens more channels than the bound is invalid-setup in the ledger, with the stream's fault as its setup problem", async () => {
    // Far more than the bound, all at once: the gateway closes every connection past its own limit as
    // it is accepted, and each such channel is gone as soon as that close comes back, so with only a
    // few past the bound the opens could arrive spread out enough never to be over it at once.
    const many = STREAM_LIMITS.maxChannels * 4;
    const connectMany = { path: `/run/study-runner-api/${GATEWAY_SOCKET_NAME}`, count: many, concurrency: many, send: "", timeoutMs: 20_000 };
    const run = overEngineApi(await prepareRun(p, { loginDir: await freshLogin(p), behaviour: { attempts: { "0": { kind: "ok", connect: [connectMany] } } } }));
    const started = startPipeline(run);
    const done = await started.done;
    expect(done.code, done.stderr).toBe(1);
    const ledger = await ledgerOf(run);
    expect(ledger.status).toBe("blocked");
    const first = ledger.observations[0]!;
    expect(first.status).toBe("invalid-setup");
    expect(JSON.stringify(first)).toMatch(new RegExp(`the engine-api stream was refused: the relay opened more than ${STREAM_LIMITS.maxChannels} channels at once`));
    expect(await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid) })).toEqual([]);
    expect(await p.runtime.listVolumesByLabel({ [LABELS.pid]: String(started.pid) })).toEqual([]);
  }, 300_000);
});
