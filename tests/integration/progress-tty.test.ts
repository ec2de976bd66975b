import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { prepareDemo, type DemoSetup } from "../../src/demo/setup.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { runnerEntry } from "../support/cli.ts";

/**
 * The live progress line needs a real terminal: `script` (util-linux) runs the shipped CLI on
 * a pseudo-terminal, so stderr.isTTY is true exactly as in a person's shell.
 */

const CLEAR = "\r\x1b[2K";
let work: string;
let demo: DemoSetup;
let behaviour: string;

/** The runner script this tier starts (tests/support/cli.ts). */
let entry: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-tty-"));
  demo = await prepareDemo(join(work, "demo"), new DockerRuntime());
  // Each attempt takes 2.5 s, so the live line is drawn at least twice per attempt.
  behaviour = join(work, "behaviour.json");
  await writeFile(behaviour, JSON.stringify({ default: { kind: "ok", delayMs: 2500 } }));
  await mkdir(join(work, "ledgers"));
  entry = await runnerEntry();
});
afterAll(() => rm(work, { recursive: true, force: true }));

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

function runOnTerminal(extra: string[], ledger: string): Promise<{ code: number | null; output: string }> {
  const argv = [
    process.execPath,
    entry,
    "--pilot",
    "--approve-budget",
    "--transport",
    "cli",
    "--root",
    `ledgerlite=${demo.roots.ledgerlite}`,
    "--output",
    ledger,
    "--image",
    demo.image,
    "--isolation",
    "offline",
    "--claude-config-dir",
    demo.loginDir,
    "--fake-behaviour",
    behaviour,
    ...extra,
  ];
  return new Promise((resolvePromise, reject) => {
    const child = spawn("script", ["-q", "-e", "-f", "-c", argv.map(quote).join(" "), "/dev/null"], {
      cwd: PROJECT_ROOT,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, TMPDIR: process.env.TMPDIR, DOCKER_HOST: process.env.DOCKER_HOST, TERM: "xterm", STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => (output += d.toString("utf8")));
    child.on("error", reject);
    // The terminal turns every \n into \r\n (onlcr); undo that so only the runner's own \r remain.
    child.on("close", (code) => resolvePromise({ code, output: output.replace(/\r\n/g, "\n") }));
  });
}

function summaryOf(output: string): { status: string; attempts: { run: number } } {
  return JSON.parse(output.slice(output.indexOf("{\n"), output.lastIndexOf("}") + 1));
}

describe("progress on a terminal", () => {
  it("rewrites a live line every second while an attempt runs and clears it before the end line", async () => {
    const { code, output } = await runOnTerminal([], join(work, "ledgers", "tty.json"));
    expect(code).toBe(0);
    expect(summaryOf(output)).toMatchObject({ status: "awaiting-adjudication", attempts: { run: 2 } });

    for (const [k, scenario] of [
      [1, "repository-only"],
      [2, "doc-bridge"],
    ] as const) {
      const tag = `study-runner: [${k}/2] ledgerlite-rounding ${scenario} rep 1`;
      const lines = output.split("\n");
      const startAt = lines.indexOf(`${tag}: started`);
      expect(startAt).toBeGreaterThanOrEqual(0);
      // The physical line after the start line holds the live frames, then the erase, then the end line.
      const live = lines[startAt + 1]!;
      const frames = live.split(CLEAR);
      expect(frames[0]).toBe("");
      const running = frames.slice(1, -1);
      expect(running.length).toBeGreaterThanOrEqual(2);
      const seconds = running.map((frame) => {
        const m = new RegExp(`^${escapeRegExp(tag)}: running (\\d+)s, spent \\$\\d\\.\\d{6} of \\$1\\.000000, run \\d+s$`).exec(frame);
        expect(m, frame).not.toBeNull();
        return Number(m![1]);
      });
      // About one frame a second: the elapsed seconds rise from 1 (a loaded machine may skip one).
      expect(seconds[0]).toBeGreaterThanOrEqual(1);
      expect(seconds[0]).toBeLessThanOrEqual(2);
      for (const [i, s] of seconds.slice(1).entries()) expect(s).toBeGreaterThan(seconds[i]!);
      expect(frames.at(-1)).toMatch(new RegExp(`^${escapeRegExp(tag)}: completed, \\d+ in / \\d+ out, .*charged \\$`));
    }
    // What stays on the screen is plain lines: every live frame was erased.
    const visible = output.split("\n").map((line) => line.split(CLEAR).at(-1)!);
    expect(visible.filter((l) => l.includes(": running "))).toEqual([]);
    expect(visible.filter((l) => l.startsWith("study-runner: ["))).toHaveLength(4);
  });

  it("prints neither lines nor live frames with --quiet, and still the summary", async () => {
    const { code, output } = await runOnTerminal(["--quiet"], join(work, "ledgers", "tty-quiet.json"));
    expect(code).toBe(0);
    expect(output).not.toContain("study-runner: [");
    expect(output).not.toContain(CLEAR);
    expect(summaryOf(output)).toMatchObject({ status: "awaiting-adjudication", attempts: { run: 2 } });
  });
});

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
