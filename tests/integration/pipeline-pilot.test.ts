/**
 * The pilot end to end on the real Docker engine: the shipped command, the demo corpus, the
 * doc-bridge arm through the runner's bridge, the fake claude image, the private ledger.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { loadManifest } from "../../src/manifest/load.ts";
import { buildPrompt, cliArguments, EMPTY_MCP_CONFIG } from "../../src/claude/args.ts";
import { containerMcpConfig } from "../../src/mcp/bridge.ts";
import { engineBundle } from "../../src/mcp/bundle-hash.ts";
import { computeRunnerHash } from "../../src/ledger/runner-hash.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import {
  containersOfRun,
  fileMode,
  freshLogin,
  ledgerOf,
  leftovers,
  preparePipeline,
  PROGRESS_LINE,
  recordsOf,
  recordsText,
  runPipeline,
  digestLines,
  stderrLines,
  summaryOf,
  MODEL,
  RESERVATION_USD,
  type Pipeline,
} from "../support/pipeline.ts";

let p: Pipeline;
beforeAll(async () => {
  p = await preparePipeline("pilot");
}, 300_000);
afterAll(() => p?.cleanup());

describe("study-runner --pilot --transport cli, end to end", () => {
  it("runs both attempts in containers and prints one summary; the ledger is private and complete", async () => {
    // Through the launcher a person runs in a clone (the suite's other runs start the compiled
    // build): the whole run works from the sources, and its engine is the clone's bundle.
    const r = await runPipeline(p, { launcher: true });
    expect(r.code, r.stderr).toBe(0);
    const summary = summaryOf(r.stdout);
    expect(summary).toMatchObject({
      status: "awaiting-adjudication",
      statusReason: null,
      mode: "pilot",
      transport: "cli",
      model: MODEL,
      ledger: r.run.output,
      attempts: { planned: 2, run: 2, byStatus: { completed: 2 } },
      usageComplete: true,
      cumulativeCapExceeded: false,
    });
    expect(summary.spentUsd).toBeGreaterThan(0);
    // 36 full-run attempts / 2 pilot attempts.
    expect(summary.extrapolatedFullRunUsd).toBe(Number((summary.spentUsd * 18).toFixed(6)));
    expect(summary.extrapolationNote).toMatch(/an extrapolation of the CLI's list-price estimate, not of a bill/);
    expect(summary.spendLabel.usd).toMatch(/CLI's own list-price estimate .*not a bill/);
    expect(summary.spendLabel.tokens).toMatch(/include the Claude Code system prompt and harness/);

    // Besides the progress, the evidence digest of each settled state (contract R177), one per attempt.
    expect(digestLines(r.stderr)).toEqual([0, 1]);
    const lines = stderrLines(r.stderr);
    expect(lines).toHaveLength(4);
    for (const line of lines) expect(line).toMatch(PROGRESS_LINE);
    expect(lines.filter((l) => l.endsWith(": started"))).toHaveLength(2);
    expect(lines.filter((l) => /: completed, /.test(l))).toHaveLength(2);

    expect(await fileMode(r.run.output)).toBe(0o600);
    const ledger = await ledgerOf(r.run);
    expect(ledger.status).toBe("awaiting-adjudication");
    // The fake image answered, not a model: the ledger says so, so it cannot pass for evidence.
    expect(ledger.modelApi).toBe("test");
    expect(ledger.runnerHash).toBe(await computeRunnerHash(PROJECT_ROOT));
    expect(ledger.spendLabel).toEqual(summary.spendLabel);
    // Provenance: the engine build that served the treatment, and each checkout's engine revision.
    const bundle = await engineBundle(referenceEngineCommand(), p.demo.roots.ledgerlite!);
    expect(ledger.docBridge?.bundleHash).toBe(bundle.bundleHash);
    expect(ledger.docBridge?.engineRevisions).toEqual({ ledgerlite: expect.stringMatching(/^reference-[0-9a-f]{12}$/) });
    expect(ledger.docBridge?.engineRevision).toBe(ledger.docBridge?.engineRevisions?.ledgerlite);
    expect(ledger.budget.spentUsd).toBe(summary.spentUsd);
    expect(ledger.budget.reservedUsd).toBe(0);
    expect(ledger.observations.map((o) => [o.arm, o.phase, o.status])).toEqual([
      ["repository", "settled", "completed"],
      ["mcp", "settled", "completed"],
    ]);
    for (const o of ledger.observations) expect(o.answer).toEqual(expect.any(String));
    // The doc-bridge call in the transcript is the one the server answered through the runner's bridge.
    const mcpObs = ledger.observations[1]!;
    expect(mcpObs.toolCallsByName["mcp__doc-bridge__doc_search"]).toBe(1);
    expect(mcpObs.mcp?.connections).toBe(1);
    expect(mcpObs.mcp?.toolCalls).toEqual([expect.objectContaining({ name: "doc.search", isError: false })]);
    expect(ledger.observations[0]!.mcp).toBeUndefined();

    expect(await containersOfRun(p, ledger.runId)).toEqual([]);
    expect(await leftovers(r.run.tmp)).toEqual([]);
  }, 120_000);

  it("--quiet prints no progress lines, only the summary", async () => {
    const r = await runPipeline(p, { args: ["--quiet"] });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    expect(summaryOf(r.stdout).status).toBe("awaiting-adjudication");
    // Started from the tier's compiled build (tests/support/compiled-cli.ts), the ledger names the
    // clone's runner: the hash of its sources, docker/ and pins, as a run from the launcher records.
    expect((await ledgerOf(r.run)).runnerHash).toBe(await computeRunnerHash(PROJECT_ROOT));
  }, 120_000);

  it("keeps the answer, the API key and the login token out of everything a user or the container sees", async () => {
    const tag = randomBytes(8).toString("hex");
    const answer = `CANARY-ANSWER-${tag}`;
    const apiKey = `sk-ant-CANARY-KEY-${tag}`;
    const token = `CANARY-TOKEN-${tag}`;
    const loginDir = await freshLogin(p, token);
    const r = await runPipeline(p, {
      loginDir,
      behaviour: { default: { kind: "ok", answer } },
      env: { ANTHROPIC_API_KEY: apiKey },
    });
    // A key that reached the CLI would change its init apiKeySource and make the attempt invalid-setup.
    expect(r.code, r.stderr).toBe(0);
    const ledgerText = await readFile(r.run.output, "utf8");
    const records = await recordsOf(r.run);
    const allRecords = await recordsText(r.run);
    expect(records.map((x) => x.record.attempt)).toEqual(["0", "1"]);
    for (const { record } of records) {
      expect(record.anthropicApiKeyPresent).toBe(false);
      expect(record.envNames.filter((n) => n.startsWith("ANTHROPIC_"))).toEqual([]);
      // The login copy was there: the token's absence from the records is not for want of a login.
      expect(record.credentialsPresent).toBe(true);
    }

    expect(ledgerText).toContain(answer);
    expect((await ledgerOf(r.run)).observations.map((o) => o.answer)).toEqual([answer, answer]);
    for (const [where, text] of [
      ["stdout", r.stdout],
      ["stderr", r.stderr],
    ] as const) {
      expect(text, where).not.toContain(answer);
      expect(text, where).not.toContain(tag);
    }
    for (const [where, text] of [
      ["ledger", ledgerText],
      ["records", allRecords],
    ] as const) {
      expect(text, where).not.toContain(apiKey);
      expect(text, where).not.toContain(token);
    }
    // The attempt HOMEs with the login copies are gone.
    expect(await leftovers(r.run.tmp)).toEqual([]);
  }, 120_000);

  it("gives the CLI exactly cliArguments, as uid 1000, read-only, offline, with only the export and a login copy", async () => {
    const hostRoot = p.demo.roots.ledgerlite!;
    const r = await runPipeline(p, {
      behaviour: { probePaths: ["/workspace/.git", "/workspace/.doc-bridge", "/workspace/eval", hostRoot, p.demo.loginDir] },
    });
    expect(r.code, r.stderr).toBe(0);
    const ledger = await ledgerOf(r.run);
    const manifest = (await loadManifest(ledger.protocol.manifestPath)).manifest;
    const records = await recordsOf(r.run);
    expect(records.map((x) => x.record.attempt)).toEqual(["0", "1"]);

    for (const { record } of records) {
      const obs = ledger.observations[Number(record.attempt)]!;
      const task = manifest.tasks.find((t) => t.id === obs.task)!;
      const prompt = buildPrompt(task);
      expect(record.argv).toEqual(
        cliArguments({
          arm: obs.arm,
          model: MODEL,
          maxBudgetUsd: RESERVATION_USD,
          prompt,
          deniedMcpTools: ledger.docBridge!.denyList,
          mcpConfig: obs.arm === "mcp" ? containerMcpConfig() : EMPTY_MCP_CONFIG,
        }),
      );
      expect(record.argv.slice(-2)).toEqual(["--", prompt]);
      // Rejected by the transport decision: --bare needs an API key, --safe-mode disables MCP
      // servers, --system-prompt would change the agent measured.
      for (const flag of ["--bare", "--safe-mode", "--system-prompt", "--append-system-prompt"]) {
        expect(
          record.argv.some((a) => a === flag || a.startsWith(`${flag}=`)),
          flag,
        ).toBe(false);
      }
      // stdin is closed: the container has none, so the CLI's fd 0 is /dev/null.
      expect(record.stdinTarget).toBe("/dev/null");

      expect(record.uid).not.toBe(0);
      expect(record.gid).not.toBe(0);
      expect(record.cwd).toBe("/workspace");
      expect(record.cwdWritable).toBe(false);
      expect(record.rootWritable).toBe(false);
      expect(record.networkInterfaces).toEqual(["lo"]);
      expect(record.home).toBe("/home/agent");
      expect(record.homeWritable).toBe(true);
      expect(record.credentialsPresent).toBe(true);
      expect(record.listings["/home/agent"]).toEqual({ entries: expect.arrayContaining([".claude"]) });

      // The image's own tree and the runner's mounts; nothing of the host's / (work, root, var, ...).
      const root = (record.listings["/"] as { entries: string[] }).entries;
      const imageRoot = [".dockerenv", "dev", "etc", "fake", "home", "lib", "lib64", "opt", "proc", "run", "sys", "tmp", "usr", "workspace"];
      expect(root.filter((e) => !imageRoot.includes(e))).toEqual([]);
      expect(record.listings["/home"]).toEqual({ entries: ["agent"] });
      expect(record.listings[hostRoot]).toEqual({ error: "ENOENT" });
      expect(record.listings[p.demo.loginDir]).toEqual({ error: "ENOENT" });

      // Issue 5: the export only; no .git, no doc-bridge index, no answer key, no dotfiles or build output.
      const workspace = (record.listings["/workspace"] as { entries: string[] }).entries;
      expect(workspace).toEqual(expect.arrayContaining(["README.md", "docs", "src", "CLAUDE.md", "AGENTS.md"]));
      for (const hidden of [".git", ".doc-bridge", ".gitignore", ".github", "eval", "dist", "data", "package-lock.json"]) {
        expect(workspace, hidden).not.toContain(hidden);
      }
      expect(record.listings["/workspace/.git"]).toEqual({ error: "ENOENT" });
      expect(record.listings["/workspace/.doc-bridge"]).toEqual({ error: "ENOENT" });
      expect(record.listings["/workspace/eval"]).toEqual({ error: "ENOENT" });
      // The doc-bridge arm sees the bridge's socket and nothing else of the server.
      expect(record.listings["/run/study-runner"]).toEqual(obs.arm === "mcp" ? { entries: ["mcp.sock"] } : { error: "ENOENT" });
    }
  }, 120_000);

  // contract: R40
  it("an MCP arm with a clean transcript but one doc-bridge call more than the server answered is invalid-setup, not a runner fault", async () => {
    // The real doc.search call goes through the bridge; a second one is only claimed in the
    // transcript, with a result that is no error: nothing but the bridge's record shows it.
    const r = await runPipeline(p, {
      behaviour: { attempts: { "1": { kind: "ok", callTool: { name: "mcp__doc-bridge__doc_search", input: { query: "rounding" } } } } },
    });
    expect(r.code, r.stderr).toBe(1);
    const ledger = await ledgerOf(r.run);
    expect(ledger.status).toBe("blocked");
    const obs = ledger.observations[1]!;
    expect(obs.arm).toBe("mcp");
    expect(obs.status).toBe("invalid-setup");
    expect(obs.mcp).toMatchObject({ connections: 1 });
    expect(obs.setupProblems).toEqual([expect.stringMatching(/^doc-bridge record: the transcript shows 2 call\(s\) of mcp__doc-bridge__doc_search but the doc-bridge server answered 1$/)]);
    expect(obs.chargedUsd).toBeGreaterThanOrEqual(RESERVATION_USD);
  }, 120_000);

  it("an MCP arm whose transcript claims a doc-bridge call the server never saw is invalid-setup", async () => {
    const r = await runPipeline(p, {
      behaviour: { attempts: { "1": { kind: "ok", simulateMcp: true, mcpCalls: [{ tool: "doc.search", arguments: { query: "rounding" } }] } } },
    });
    expect(r.code, r.stderr).toBe(1);
    const summary = summaryOf(r.stdout);
    expect(summary).toMatchObject({ status: "blocked", attempts: { run: 2, byStatus: { completed: 1, "invalid-setup": 1 } } });
    const ledger = await ledgerOf(r.run);
    expect(ledger.status).toBe("blocked");
    expect(ledger.statusReason).toMatch(/^attempt 2 .*ended invalid-setup/);
    const obs = ledger.observations[1]!;
    expect(obs.status).toBe("invalid-setup");
    expect(obs.toolCallsByName["mcp__doc-bridge__doc_search"]).toBe(1);
    expect(obs.mcp).toMatchObject({ connections: 0, toolCalls: [] });
    expect(obs.setupProblems.filter((m) => m.startsWith("doc-bridge record: "))).not.toEqual([]);
    expect(obs.chargedUsd).toBeGreaterThanOrEqual(RESERVATION_USD);
  }, 120_000);
});
