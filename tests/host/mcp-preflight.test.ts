import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import { preflightDocBridge, probeServer, referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { RefusalError } from "../../src/util/errors.ts";
import { REFERENCE_ENGINE_REVISION } from "../../src/mcp/reference-server.ts";
import { DOC_CONFIG, ENGINE, INDEX_ROOT, docFiles, makeRepo, runIndex, writeStandInServer } from "./mcp-fixtures.ts";

const execFileP = promisify(execFile);
const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

async function indexedRepo(config: Record<string, unknown> = DOC_CONFIG) {
  const r = await makeRepo(docFiles(config), cleanup);
  await runIndex(r.dir);
  return r;
}

/** The refusal's message, or a failure when the promise does not reject with a RefusalError. */
async function refusal(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RefusalError);
  return (err as RefusalError).message;
}

describe("doc-bridge preflight", () => {
  it("passes on fresh indexes and derives the deny list from the live tools/list", async () => {
    const a = await indexedRepo();
    const b = await indexedRepo();
    const result = await preflightDocBridge({
      command: ENGINE,
      checkouts: [
        { repository: "alpha", dir: a.dir, pin: a.commit },
        { repository: "beta", dir: b.dir, pin: b.commit },
      ],
    });
    expect(result.tools).toEqual(["doc.get", "doc.search", "gate.status", "handoff.resolve", "memory.promoteDraft"]);
    expect(result.deniedTools).toEqual(["gate.status", "memory.promoteDraft"]);
    expect(result.allowedCliTools).toEqual(["mcp__doc-bridge__doc_search", "mcp__doc-bridge__doc_get", "mcp__doc-bridge__handoff_resolve"]);
    expect(result.deniedCliTools).toEqual(["mcp__doc-bridge__gate_status", "mcp__doc-bridge__memory_promoteDraft"]);
    expect(result.checkouts.map((c) => [c.repository, c.configFile])).toEqual([
      ["alpha", "doc-bridge.config.json"],
      ["beta", "doc-bridge.config.json"],
    ]);
    expect(result.checkouts[0]!.serverInfo?.name).toBe("doc-bridge-reference");
    expect(result.checkouts[0]!.engineRevision).toMatch(/^reference-[0-9a-f]{12}$/);
  });

  it("denies every extra tool a server lists", async () => {
    const a = await indexedRepo({ ...DOC_CONFIG, extraTools: ["admin.reset"] });
    const result = await preflightDocBridge({ command: ENGINE, checkouts: [{ repository: "alpha", dir: a.dir, pin: a.commit }] });
    expect(result.deniedCliTools).toEqual(["mcp__doc-bridge__admin_reset", "mcp__doc-bridge__gate_status", "mcp__doc-bridge__memory_promoteDraft"]);
  });

  it("refuses two tools that Claude Code would give the same name", async () => {
    const a = await indexedRepo({ ...DOC_CONFIG, extraTools: ["doc_search"] });
    const msg = await refusal(preflightDocBridge({ command: ENGINE, checkouts: [{ repository: "alpha", dir: a.dir, pin: a.commit }] }));
    expect(msg).toContain("checkout alpha");
    expect(msg).toContain("tools doc.search and doc_search both become mcp__doc-bridge__doc_search");
  });

  it("refuses a stale index (a commit after indexing), naming the checkout", async () => {
    const a = await indexedRepo();
    const built = a.commit;
    const head = await a.commitFiles([{ path: "docs/later.md", content: "# Later\n" }]);
    const msg = await refusal(preflightDocBridge({ command: ENGINE, checkouts: [{ repository: "alpha", dir: a.dir, pin: head }] }));
    expect(msg).toContain(`checkout alpha (${a.dir})`);
    expect(msg).toContain(`index is stale: built at ${built}, HEAD is ${head}`);
  });

  it("refuses a pin without an index when only a later commit was indexed (the engine sees the pin, not the checkout's HEAD)", async () => {
    const a = await makeRepo(docFiles(), cleanup);
    const old = a.commit;
    const head = await a.commitFiles([{ path: "docs/later.md", content: "# Later\n" }]);
    await runIndex(a.dir);
    const msg = await refusal(preflightDocBridge({ command: ENGINE, checkouts: [{ repository: "alpha", dir: a.dir, pin: old }] }));
    expect(msg).toContain("checkout alpha");
    expect(msg).toContain(`index is stale: built at ${head}, HEAD is ${old}`);
  });

  it("refuses a checkout without a config, naming it, before starting any server", async () => {
    const good = await indexedRepo();
    const bare = await makeRepo([{ path: "README.md", content: "# x\n" }], cleanup);
    const msg = await refusal(
      preflightDocBridge({
        command: ENGINE,
        checkouts: [
          { repository: "alpha", dir: good.dir, pin: good.commit },
          { repository: "bare", dir: bare.dir, pin: bare.commit },
        ],
      }),
    );
    expect(msg).toContain(`checkout bare (${bare.dir})`);
    expect(msg).toContain("no doc-bridge config");
  });

  it("refuses a config the reference engine cannot load, with the engine's reason", async () => {
    // .mjs precedes .json in the server's order, so the engine must load the .mjs, and cannot.
    const a = await makeRepo([...docFiles(), { path: "doc-bridge.config.mjs", content: "export default {}\n" }], cleanup);
    const msg = await refusal(preflightDocBridge({ command: ENGINE, checkouts: [{ repository: "alpha", dir: a.dir, pin: a.commit }] }));
    expect(msg).toContain("checkout alpha");
    expect(msg).toContain("doc-bridge.config.mjs is unsupported by the reference server");
  });

  it("refuses checkouts whose servers list different tools, naming both and the difference", async () => {
    const a = await indexedRepo();
    const b = await indexedRepo({ ...DOC_CONFIG, extraTools: ["gate.override"] });
    const msg = await refusal(
      preflightDocBridge({
        command: ENGINE,
        checkouts: [
          { repository: "alpha", dir: a.dir, pin: a.commit },
          { repository: "beta", dir: b.dir, pin: b.commit },
        ],
      }),
    );
    expect(msg).toBe(`doc-bridge preflight refused: checkouts alpha (${a.dir}) and beta (${b.dir}) list different tools; only in alpha: none; only in beta: gate.override`);
  });

  it("refuses a server that crashes at start, naming the checkout and showing its stderr", async () => {
    const a = await indexedRepo();
    const crash = [process.execPath, "-e", "console.error('engine exploded'); process.exit(1)"];
    const msg = await refusal(preflightDocBridge({ command: crash, checkouts: [{ repository: "alpha", dir: a.dir, pin: a.commit }] }));
    expect(msg).toContain(`checkout alpha (${a.dir})`);
    expect(msg).toContain("engine exploded");
  });

  it("refuses an engine that does not exist", async () => {
    const a = await indexedRepo();
    const msg = await refusal(preflightDocBridge({ command: ["/nonexistent/doc-bridge"], checkouts: [{ repository: "alpha", dir: a.dir, pin: a.commit }] }));
    expect(msg).toContain("checkout alpha");
    // Started through setpriv when the runner is root, else spawned directly.
    expect(msg).toMatch(/ENOENT|No such file or directory/);
  });

  it("refuses a server that never answers, within the timeout", async () => {
    const a = await indexedRepo();
    const started = Date.now();
    const silent = [process.execPath, "-e", "process.stdin.resume(); setTimeout(() => {}, 60000)"];
    const msg = await refusal(preflightDocBridge({ command: silent, timeoutMs: 1500, checkouts: [{ repository: "alpha", dir: a.dir, pin: a.commit }] }));
    expect(msg).toContain("checkout alpha");
    expect(msg).toMatch(/timed out|no answer within 1500 ms/i);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("refuses a server that lacks one of the three allowed tools", async () => {
    const a = await makeRepo(docFiles(), cleanup);
    const standIn = await writeStandInServer(cleanup);
    const ok = await preflightDocBridge({ command: [process.execPath, standIn], checkouts: [{ repository: "alpha", dir: a.dir, pin: a.commit }] });
    expect(ok.checkouts[0]!.engineRevision).toBe("stand-in-rev");
    const msg = await refusal(preflightDocBridge({ command: [process.execPath, standIn, "--without-handoff"], checkouts: [{ repository: "alpha", dir: a.dir, pin: a.commit }] }));
    expect(msg).toContain("checkout alpha");
    expect(msg).toContain("the server does not list handoff.resolve");
  });

  it("starts the engine with an allowlisted environment: never ANTHROPIC_API_KEY", async () => {
    const a = await makeRepo(docFiles(), cleanup);
    const standIn = await writeStandInServer(cleanup);
    const saved = { key: process.env.ANTHROPIC_API_KEY, canary: process.env.STUDY_RUNNER_CANARY };
    process.env.ANTHROPIC_API_KEY = "sk-ant-canary-not-a-key";
    process.env.STUDY_RUNNER_CANARY = "1";
    try {
      const probe = await probeServer({ command: [process.execPath, standIn], cwd: a.dir, pin: a.commit });
      expect(probe.tools).toContain("env.PATH");
      expect(probe.tools).not.toContain("env.ANTHROPIC_API_KEY");
      expect(probe.tools).not.toContain("env.STUDY_RUNNER_CANARY");
      expect(probe.serverInfo).toEqual({ name: "stand-in", version: "9.9.9" });
    } finally {
      for (const [k, v] of [
        ["ANTHROPIC_API_KEY", saved.key],
        ["STUDY_RUNNER_CANARY", saved.canary],
      ] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  it("the default engine command works from a cwd outside the project", async () => {
    const a = await makeRepo(docFiles(), cleanup);
    const cmd = referenceEngineCommand();
    // One bundled file, no loader: nothing resolved from the checkout, which has no packages.
    expect(cmd).toEqual([process.execPath, expect.stringMatching(/\/reference-engine\/[0-9a-f]{64}\/reference-server\.mjs$/)]);
    const { stderr } = await execFileP(cmd[0]!, [...cmd.slice(1), "index"], { cwd: a.dir, env: { PATH: process.env.PATH ?? "", STUDY_RUNNER_DOC_INDEX: INDEX_ROOT } });
    expect(stderr).toContain(`indexed 2 documents at ${a.commit}`);
    const probe = await probeServer({ command: cmd, cwd: a.dir, pin: a.commit });
    expect(probe.tools).toContain("doc.search");
    // The bundle is the same engine revision as the source the runner imports (which builds the demo's indexes).
    expect(probe.engineRevision).toBe(REFERENCE_ENGINE_REVISION);
  });
});
