/**
 * The session demo: two small synthetic repositories like the field notes' (an invoice whose
 * rounding is undecided, discounts whose tier percentages are undecided), a session manifest whose
 * scripted answers settle each question, a fake-claude behaviour that plays each session (ask,
 * then on resume edit a file and say done) and scripted Messages API conversations that make the
 * real CLI do the same with real tool calls.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { makeRepository } from "./corpus.ts";
import { CLAUDE_CODE_VERSION } from "../claude/version.ts";
import type { ScriptInput } from "../stand-ins/scripted-api/script.ts";
import type { SandboxChannel } from "../sandbox/docker-sandbox.ts";

const PACKAGE = '{ "name": "demo", "version": "1.0.0", "type": "module", "private": true }\n';

export const SESSION_REPOSITORIES = {
  invoicer: {
    "package.json": PACKAGE,
    "README.md": "# invoicer\n\nTotals of invoice lines. The total must be rounded for display; how is not decided yet.\n",
    "src/invoice.js": "export function total(lines) {\n  const sum = lines.reduce((n, l) => n + l.qty * l.price, 0);\n  return sum;\n}\n",
    "test/invoice.test.js":
      "import { test } from 'node:test';\nimport assert from 'node:assert/strict';\nimport { total } from '../src/invoice.js';\n\n" +
      "test('a total has at most two decimals', () => {\n  assert.equal(total([{ qty: 3, price: 41.152 }]), 123.46);\n});\n",
  },
  discounts: {
    "package.json": PACKAGE,
    "README.md": "# discounts\n\nCustomers ACME Test Ltd (gold) and Example Traders (silver). Tier percentages are not decided yet.\n",
    "src/discount.js": "export const TIERS = {};\n\nexport function discounted(price, tier) {\n  return price * (1 - (TIERS[tier] ?? 0) / 100);\n}\n",
    "test/discount.test.js":
      "import { test } from 'node:test';\nimport assert from 'node:assert/strict';\nimport { discounted } from '../src/discount.js';\n\n" +
      "test('gold gets 10%, silver 5%', () => {\n  assert.equal(discounted(200, 'gold'), 180);\n  assert.equal(discounted(200, 'silver'), 190);\n});\n",
  },
} as const;

export const FIXED_INVOICE = "export function total(lines) {\n  const sum = lines.reduce((n, l) => n + l.qty * l.price, 0);\n  return Math.round(sum * 100) / 100;\n}\n";
export const FIXED_DISCOUNT = "export const TIERS = { gold: 10, silver: 5 };\n\nexport function discounted(price, tier) {\n  return price * (1 - (TIERS[tier] ?? 0) / 100);\n}\n";

export const ROUNDING_QUESTION = "2 decimal places (123.456 -> 123.46) or the nearest whole unit (-> 123)?";
export const TIER_QUESTION = "What discount percentage for each tier: gold and silver?";

/** Markers in the task prompts: the scripted API picks each session's conversation by them. */
const MARK_ROUNDING = "session-demo: invoice rounding";
const MARK_TIERS = "session-demo: discount tiers";

export interface SessionDemo {
  roots: Record<string, string>;
  manifestPath: string;
  /** Behaviour file for the fake image (attempt index = the session's position). */
  behaviourPath: string;
}

export async function makeSessionDemo(dir: string): Promise<SessionDemo> {
  const roots: Record<string, string> = {};
  const pins: Record<string, string> = {};
  for (const [name, files] of Object.entries(SESSION_REPOSITORIES)) {
    roots[name] = join(dir, "repos", name);
    pins[name] = await makeRepository(roots[name]!, files);
  }
  const test = ["/usr/local/bin/node", "--test"];
  const manifest = {
    version: 1,
    title: "session demo: a question, a scripted answer, a resume in a fresh container",
    repositories: pins,
    tasks: [
      {
        id: "invoice-rounding",
        kind: "session",
        repository: "invoicer",
        prompt: `${MARK_ROUNDING}\nRound invoice totals in src/invoice.js for display.`,
        testCommand: test,
        answers: ["2 decimal places"],
      },
      {
        id: "discount-tiers",
        kind: "session",
        repository: "discounts",
        prompt: `${MARK_TIERS}\nFill in the tier percentages in src/discount.js for our two customers.`,
        testCommand: test,
        answers: ["gold 10%, silver 5%"],
      },
    ],
  };
  const manifestPath = join(dir, "sessions.json");
  await writeFile(manifestPath, `${JSON.stringify(manifest, null, 2)}\n`);
  const behaviourPath = join(dir, "fake-sessions.json");
  await writeFile(behaviourPath, JSON.stringify(fakeSessionBehaviour()));
  return { roots, manifestPath, behaviourPath };
}

/** The fake image plays each session: one question, then the edit and done. */
export function fakeSessionBehaviour() {
  return {
    attempts: {
      "0": { kind: "ok", session: { questions: 1, question: ROUNDING_QUESTION, edits: [{ path: "src/invoice.js", content: FIXED_INVOICE }] } },
      "1": { kind: "ok", session: { questions: 1, question: TIER_QUESTION, edits: [{ path: "src/discount.js", content: FIXED_DISCOUNT }] } },
    },
  };
}

const usage = (input_tokens: number, output_tokens: number) => ({ input_tokens, output_tokens });

/** One session's conversation: read the file, ask the question, (the synthetic turn), write the fix, say done; `tokens` are each turn's input and output. */
function sessionScript(s: { name: string; marker: string; path: string; question: string; fixed: string; done: string; tokens: Array<[input: number, output: number]> }): ScriptInput {
  const file_path = `/workspace/${s.path}`;
  const turns = [
    { toolCalls: [{ name: "Read", input: { file_path } }] },
    { toolCalls: [{ name: "StructuredOutput", input: { status: "question", question: s.question, summary: `Read ${s.path}; nothing changed yet.` } }] },
    { answer: "never served: the CLI's own synthetic assistant message takes this place" },
    { toolCalls: [{ name: "Write", input: { file_path, content: s.fixed } }] },
    { toolCalls: [{ name: "StructuredOutput", input: { status: "done", summary: s.done } }] },
  ];
  return { name: s.name, marker: s.marker, turns: turns.map((t, k) => ({ ...t, usage: usage(...s.tokens[k]!) })) };
}

/**
 * The real CLI's conversations. A resume re-sends the first call's messages, so the same marker
 * selects the same script and the assistant count picks the turn: read, ask (StructuredOutput),
 * then on resume write the fix and say done. Measured on 2.1.296 (tests/conformance/sessions.test.ts):
 * the resumed history holds a synthetic assistant message "No response requested." after the
 * StructuredOutput result, so the resume's first request has three assistant turns, not two, and
 * turn 2 is never served.
 */
export function sessionDemoScripts(): ScriptInput[] {
  return [
    sessionScript({
      name: "session-rounding",
      marker: MARK_ROUNDING,
      path: "src/invoice.js",
      question: ROUNDING_QUESTION,
      fixed: FIXED_INVOICE,
      done: "total() now rounds to 2 decimal places.",
      tokens: [
        [1200, 40],
        [1500, 60],
        [1, 1],
        [1900, 120],
        [2100, 50],
      ],
    }),
    sessionScript({
      name: "session-tiers",
      marker: MARK_TIERS,
      path: "src/discount.js",
      question: TIER_QUESTION,
      fixed: FIXED_DISCOUNT,
      done: "TIERS now holds gold 10 and silver 5.",
      tokens: [
        [1100, 35],
        [1400, 55],
        [1, 1],
        [1800, 110],
        [2000, 45],
      ],
    }),
  ];
}

/**
 * `study-runner demo --sessions`: both session tasks through the runner (ledger, worktrees,
 * containers), with the fake image, or with `realCli` the real pinned binary and the scripted
 * API: start, question, scripted answer, resume in a fresh container, done, tests.
 */
export async function runSessionDemo(workdir: string, options: { model: string; realCli?: boolean; quiet?: boolean; runtime?: string; sandboxChannel?: SandboxChannel; cliVersion?: string }) {
  const [{ mkdir, mkdtemp }, { DockerRuntime }, { buildImage }, specs, { writeTestLogin }, { startSessions }, { startDemoGatewayApi }, { ensureClaudeBinary }] = await Promise.all([
    import("node:fs/promises"),
    import("../sandbox/docker.ts"),
    import("../image/build.ts"),
    import("../image/specs.ts"),
    import("./setup.ts"),
    import("../session/run.ts"),
    import("./real-cli.ts"),
    import("../image/install.ts"),
  ]);
  const runtime = new DockerRuntime();
  await mkdir(workdir, { recursive: true });
  const demo = await makeSessionDemo(await mkdtemp(join(workdir, "sessions-")));
  const loginDir = join(workdir, "login");
  await writeTestLogin(loginDir);
  let image: string;
  let api: Awaited<ReturnType<typeof startDemoGatewayApi>> | undefined;
  if (options.realCli) {
    const binary = await ensureClaudeBinary({ version: options.cliVersion ?? CLAUDE_CODE_VERSION });
    image = (await buildImage(runtime, await specs.claudeCodeImageSpec({ claudeBinary: binary.path, version: options.cliVersion ?? CLAUDE_CODE_VERSION }))).id;
    // The scripted API is the upstream of the runner's gateway, as the real API would be.
    api = await startDemoGatewayApi(workdir, { script: sessionDemoScripts() });
  } else {
    image = (await buildImage(runtime, await (await import("./fake-image.ts")).fakeImageSpec())).id;
  }
  const ledgers = join(workdir, "ledgers");
  await mkdir(ledgers, { recursive: true, mode: 0o700 });
  const output = join(ledgers, `sessions-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  try {
    return await startSessions(
      {
        manifestPath: demo.manifestPath,
        roots: new Map(Object.entries(demo.roots)),
        output,
        model: options.model,
        image,
        expectedCliVersion: options.realCli ? (options.cliVersion ?? CLAUDE_CODE_VERSION) : CLAUDE_CODE_VERSION,
        ...(options.runtime !== undefined ? { ociRuntime: options.runtime } : {}),
        capUsd: 1,
        callBudgetUsd: 0.2,
        sessionBudgetUsd: 0.5,
        isolation: "offline",
        claudeConfigDir: loginDir,
        // Through the gateway, as `sessions start` defaults to: the test login stays on the host, so
        // the calls run on either channel (the login-copy mode is not carried over the engine's API).
        credentials: "gateway",
        ...(options.sandboxChannel !== undefined ? { sandboxChannel: options.sandboxChannel } : {}),
        ...(api ? { oauthTokenFile: api.tokenFile, gatewayUpstream: { url: api.upstream, ca: api.ca } } : { fake: { behaviourFile: demo.behaviourPath } }),
      },
      { runtime, say: options.quiet ? undefined : (line) => process.stderr.write(`study-runner demo --sessions: ${line}\n`) },
    );
  } finally {
    await api?.close();
  }
}
