/**
 * `study-runner demo --pilot --real-cli` and `demo --sessions --real-cli`: the demos a person runs
 * to see the real pinned CLI drive the runner, on the default path: the scripted model is the
 * upstream of the runner's model gateway (loopback TLS, a throw-away CA), the containers hold a
 * placeholder login. Checks what that person would look at, and that the ledger carries the
 * gateway's per-request records of every attempt and session call, metered equal to the transcript.
 */
import { cp, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, type CliResult } from "../support/cli.ts";
import { readSessionLedger } from "../../src/session/store.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { assertRealCliPilot } from "./real-cli-pilot.ts";
import { assertMeteredEqualsTranscript, realImage } from "./support.ts";

let work = "";
let run: CliResult;
let sessionsWork = "";
let sessions: CliResult;

beforeAll(async () => {
  await realImage(); // installs and builds under the shared lock, so the demo finds both cached
  work = await mkdtemp(join(tmpdir(), "sr-conf-demo-"));
  run = await runCli(["demo", "--pilot", "--real-cli", "--quiet", "--workdir", work], { timeoutMs: 240_000 });
  sessionsWork = await mkdtemp(join(tmpdir(), "sr-conf-demo-sessions-"));
  sessions = await runCli(["demo", "--sessions", "--real-cli", "--quiet", "--workdir", sessionsWork], { timeoutMs: 240_000 });
}, 600_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
  if (sessionsWork) await rm(sessionsWork, { recursive: true, force: true });
});

describe("demo --pilot --real-cli", () => {
  // contract: R139
  it("completes both attempts in the real image through the gateway, its ledger carrying every request metered equal to the transcript", async () => {
    const ledger = await assertRealCliPilot(run, work);
    expect(ledger.sandbox?.channel).toBe("host-paths");
  });
});

/** Rewrites one kept transcript with `edit` (each parsed line) and its ledger entry to match: the hash, and the answer when the result changed. */
async function rewrite(ledgerPath: string, index: number, edit: (event: Record<string, any>) => void): Promise<void> {
  const file = join(`${ledgerPath}.transcripts`, `${String(index).padStart(4, "0")}.jsonl`);
  const lines = (await readFile(file, "utf8")).split("\n").filter((l) => l !== "");
  const events = lines.map((l) => JSON.parse(l) as Record<string, any>);
  for (const e of events) edit(e);
  const bytes = events.map((e) => JSON.stringify(e)).join("\n") + "\n";
  await writeFile(file, bytes);
  const ledger = JSON.parse(await readFile(ledgerPath, "utf8"));
  ledger.observations[index].transcriptSha256 = createHash("sha256").update(bytes).digest("hex");
  const result = events.find((e) => e.type === "result");
  if (typeof result?.result === "string") ledger.observations[index].answer = result.result;
  await writeFile(ledgerPath, JSON.stringify(ledger, null, 2));
}

describe("demo --pilot --real-cli: what the model said is bound", () => {
  // contract: R176
  // contract: R177
  it("`ledger verify` passes on the real CLI's gateway ledger and each digest the run printed; a rewritten tool call or answer, with its ledger entry, is named by message, and the old digest matches no state", async () => {
    const digests = [...run.stdout.matchAll(/"digest": "([0-9a-f]{64})"/g)].map((m) => m[1]!);
    expect(digests).toHaveLength(2);
    const copy = await mkdtemp(join(tmpdir(), "sr-conf-bound-"));
    try {
      const name = (await readdir(join(work, "ledgers"))).find((f) => /^run-.*\.json$/.test(f) && !f.endsWith(".adjudication.json"))!;
      await cp(join(work, "ledgers", name), join(copy, name));
      await cp(join(work, "ledgers", `${name}.transcripts`), join(copy, `${name}.transcripts`), { recursive: true });
      const file = join(copy, name);
      const first = await runCli(["ledger", "verify", file, "--digest", digests[0]!]);
      expect(first.code, first.stdout + first.stderr).toBe(0);
      expect(first.stdout).toContain("they differ since observation 1");
      const last = await runCli(["ledger", "verify", file, "--digest", digests[1]!]);
      expect(last.code, last.stdout + last.stderr).toBe(0);
      expect(last.stdout).toContain("nothing changed since");

      const ledger = await readLedger(file);
      // Observation 0: the first tool call's input. Observation 1: the answer, in its message and in the result.
      let toolCallMessage = "";
      await rewrite(file, 0, (e) => {
        const block = e.type === "assistant" && toolCallMessage === "" ? e.message.content.find((b: any) => b.type === "tool_use") : undefined;
        if (block) {
          block.input = { ...block.input, rewritten: true };
          toolCallMessage = e.message.id;
        }
      });
      const answer = ledger.observations[1]!.answer!;
      let answerMessage = "";
      await rewrite(file, 1, (e) => {
        if (e.type === "result") e.result = e.result.replace(answer, "Rewritten answer.");
        for (const b of e.type === "assistant" ? e.message.content : []) {
          if (b.type === "text" && b.text.includes(answer.slice(0, 40))) {
            b.text = "Rewritten answer.";
            answerMessage = e.message.id;
          }
        }
      });
      expect(toolCallMessage).not.toBe("");
      expect(answerMessage).not.toBe("");
      const forged = await runCli(["ledger", "verify", file, "--digest", digests[1]!]);
      expect(forged.code).toBe(1);
      const out = forged.stdout + forged.stderr;
      expect(out).toContain(`contentSha256: the transcript's assistant message "${toolCallMessage}"`);
      expect(out).toContain(`contentSha256: the transcript's assistant message "${answerMessage}"`);
      expect(out).toContain(`digest: ${digests[1]} is the digest of no settled state of these files`);
      expect(out).not.toContain("Rewritten answer.");
    } finally {
      await rm(copy, { recursive: true, force: true });
    }
  });
});

describe("demo --sessions --real-cli", () => {
  // contract: R139
  it("starts and resumes both sessions through the gateway, each call's ledger entry carrying its requests, metered equal to its cost", async () => {
    expect(sessions.code, sessions.stderr).toBe(0);
    const file = (await readdir(join(sessionsWork, "ledgers"))).find((f) => /^sessions-.*\.json$/.test(f))!;
    const ledger = await readSessionLedger(join(sessionsWork, "ledgers", file));
    expect(ledger.sessions.map((s) => s.state)).toEqual(["done", "done"]);
    for (const s of ledger.sessions) {
      expect(s.calls.map((c) => c.mode)).toEqual(["start", "resume"]);
      for (const c of s.calls) {
        const g = c.gateway!;
        expect(g.requests.length).toBeGreaterThan(0);
        expect(g.requests.every((r) => r.status === 200 && r.refused === null && r.complete)).toBe(true);
        expect(g.setupProblems).toEqual([]);
        expect(c.meteredCostUsd).toBeCloseTo(c.callCostUsd!, 9);
        // Per message on the prompt side; a resumed call's modelUsage covers the whole session, so its sums are the start's plus its own.
        if (c.mode === "start") assertMeteredEqualsTranscript(`session ${s.id} start`, g, c);
      }
    }
    expect((await readdir(sessionsWork)).filter((n) => n.startsWith("model-api-"))).toEqual([]);
  });

  // contract: R157
  it("`ledger verify` holds each call's gateway records to its kept transcript, and names a record whose message is not in it", async () => {
    const file = join(sessionsWork, "ledgers", (await readdir(join(sessionsWork, "ledgers"))).find((f) => /^sessions-.*\.json$/.test(f))!);
    const clean = await runCli(["ledger", "verify", file]);
    expect(clean.code, clean.stdout + clean.stderr).toBe(0);
    const edited = JSON.parse(await readFile(file, "utf8"));
    edited.sessions[0].calls[0].gateway.requests[0].messageId = "msg_fabricated";
    await writeFile(file, JSON.stringify(edited, null, 2));
    const forged = await runCli(["ledger", "verify", file]);
    expect(forged.code).toBe(1);
    expect(forged.stdout + forged.stderr).toContain("sessions[0].calls[0].gateway.requests[0].messageId: names a message that is not in the transcript");
  });
});
