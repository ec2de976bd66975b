/**
 * The bundled demo corpus: three small git repositories made deterministically (fixed
 * identity, dates and file bytes, a config-free git environment), so the commit ids pinned
 * in study/demo/manifest.json are the same on every machine. Each repository holds the
 * traps a real corpus has: CLAUDE.md, AGENTS.md, dotfiles, a lockfile, dist/, a file over
 * the 200000-byte export limit, a symlink, and (in ledgerlite) an answer key.
 */
import { mkdir, rm, symlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { runChild } from "../process/child.ts";

type FileSpec = string | { symlink: string };

const IDENTITY = {
  GIT_AUTHOR_NAME: "Study Demo",
  GIT_AUTHOR_EMAIL: "demo@study-runner.invalid",
  GIT_COMMITTER_NAME: "Study Demo",
  GIT_COMMITTER_EMAIL: "demo@study-runner.invalid",
};

function bigCsv(seed: number): string {
  const lines = ["id,account,amount_minor,currency"];
  let i = 0;
  while (lines.join("\n").length < 210_000) {
    for (let k = 0; k < 500; k++, i++) lines.push(`${i},acct-${(i * seed) % 97},${(i * 7919 + seed) % 100000},EUR`);
  }
  return lines.join("\n") + "\n";
}

function commonTraps(name: string, seed: number): Record<string, FileSpec> {
  return {
    "CLAUDE.md": `# ${name}\n\nNotes for coding agents: run \`npm test\` before you commit. Source lives in src/, docs in docs/.\n`,
    "AGENTS.md": `# Agents\n\nFollow the conventions in docs/. Do not edit dist/ by hand; it is generated.\n`,
    ".editorconfig": "root = true\n\n[*]\nindent_style = space\nindent_size = 2\n",
    ".gitignore": "node_modules/\n.doc-bridge/\n",
    ".github/workflows/ci.yml": "name: ci\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n      - run: npm test\n",
    "package-lock.json": JSON.stringify({ name, lockfileVersion: 3, requires: true, packages: { "": { name } } }, null, 2) + "\n",
    [`dist/${name}.min.js`]: `/* generated */export const version="1.0.${seed}";\n`,
    "data/fixtures.csv": bigCsv(seed),
    "doc-bridge.config.json": JSON.stringify({ docs: ["docs/**/*.md", "README.md"], index: ".doc-bridge/index.json" }, null, 2) + "\n",
  };
}

export const DEMO_REPOSITORIES: Record<string, Record<string, FileSpec>> = {
  ledgerlite: {
    ...commonTraps("ledgerlite", 3),
    "README.md": "# ledgerlite\n\nA tiny double-entry ledger for small shops. See docs/ for rounding, currencies and closing periods.\n",
    "docs/rounding.md":
      "# Rounding\n\nAll amounts are stored as integers in the currency's minor unit (cents for EUR).\n\n" +
      "When an amount is converted between currencies, ledgerlite rounds **half to even** (banker's rounding)\n" +
      "to the target currency's minor unit. The function is `roundMinor` in `src/money.js`.\n\n" +
      "Currencies without a minor unit (JPY) use an exponent of 0.\n",
    "docs/periods.md":
      "# Closing a period\n\n`closePeriod(ledger, date)` refuses to close while any entry is unbalanced.\n" +
      "A closed period is read-only: `post()` throws `PeriodClosedError` for dates on or before the close date.\n",
    "docs/latest.md": { symlink: "rounding.md" },
    "src/money.js":
      "export const EXPONENTS = { EUR: 2, USD: 2, JPY: 0 };\n\n" +
      "/** Round a fractional minor-unit amount half to even. */\n" +
      "export function roundMinor(value) {\n  const floor = Math.floor(value);\n  const diff = value - floor;\n" +
      "  if (diff > 0.5) return floor + 1;\n  if (diff < 0.5) return floor;\n  return floor % 2 === 0 ? floor : floor + 1;\n}\n\n" +
      "export function convert(amountMinor, from, to, rate) {\n  const scale = 10 ** (EXPONENTS[to] - EXPONENTS[from]);\n" +
      "  return roundMinor(amountMinor * rate * scale);\n}\n",
    "src/ledger.js":
      "export class PeriodClosedError extends Error {}\n\nexport function post(ledger, entry) {\n" +
      "  if (ledger.closedThrough && entry.date <= ledger.closedThrough) throw new PeriodClosedError(entry.date);\n" +
      "  ledger.entries.push(entry);\n}\n\nexport function closePeriod(ledger, date) {\n" +
      "  if (ledger.entries.some((e) => e.debit !== e.credit)) throw new Error('unbalanced entries');\n  ledger.closedThrough = date;\n}\n",
    "eval/answer-key.md": "# Answer key (never exported)\n\n- rounding: half to even, roundMinor in src/money.js\n- periods: PeriodClosedError\n",
  },
  queuekit: {
    ...commonTraps("queuekit", 5),
    "README.md": "# queuekit\n\nA small persistent job queue. Retries and configuration are described in docs/.\n",
    "docs/retries.md":
      "# Retries\n\nA failed job is retried with exponential backoff: 2 s, 4 s, 8 s, … capped at 5 minutes.\n" +
      "After `maxAttempts` (default 5) the job moves to the dead-letter queue `dead`.\n" +
      "The schedule is computed by `nextDelay` in `src/backoff.js`.\n",
    "docs/config.md":
      "# Configuration\n\n| key | default | meaning |\n| --- | --- | --- |\n| `concurrency` | 4 | jobs run at once |\n" +
      "| `maxAttempts` | 5 | tries before dead-letter |\n| `visibilityTimeoutMs` | 30000 | lease of a claimed job |\n",
    "src/backoff.js": "const CAP_MS = 300_000;\n\nexport function nextDelay(attempt) {\n  return Math.min(CAP_MS, 2000 * 2 ** (attempt - 1));\n}\n",
    "src/queue.js":
      "import { nextDelay } from './backoff.js';\n\nexport const DEFAULTS = { concurrency: 4, maxAttempts: 5, visibilityTimeoutMs: 30000 };\n\n" +
      "export function fail(job, config = DEFAULTS) {\n  job.attempts += 1;\n" +
      "  if (job.attempts >= config.maxAttempts) return { queue: 'dead' };\n  return { queue: 'ready', delayMs: nextDelay(job.attempts) };\n}\n",
    "docs/current.md": { symlink: "config.md" },
  },
  routekit: {
    ...commonTraps("routekit", 7),
    "README.md": "# routekit\n\nA minimal HTTP router. Matching rules and middleware order are in docs/.\n",
    "docs/matching.md":
      "# Matching\n\nStatic segments win over parameters, and parameters win over the wildcard `*`.\n" +
      "Among routes of the same kind, the one registered first wins. See `rank()` in `src/match.js`.\n",
    "docs/middleware.md":
      "# Middleware\n\nMiddleware runs in registration order before the handler, and in reverse order after it (onion model).\n" +
      "A middleware that does not call `next()` ends the request; the handler is not called.\n",
    "src/match.js": "export function rank(segment) {\n  if (segment === '*') return 0;\n  if (segment.startsWith(':')) return 1;\n  return 2;\n}\n",
    "src/compose.js": "export function compose(middleware, handler) {\n  return (ctx) => middleware.reduceRight((next, mw) => () => mw(ctx, next), () => handler(ctx))();\n}\n",
    "docs/index.md": { symlink: "matching.md" },
  },
};

const DATE = "2026-10-01T12:00:00+00:00";

async function run(cwd: string, args: string[]): Promise<string> {
  const { stdout } = await runChild("git", args, {
    cwd,
    timeoutMs: 60_000,
    maxOutputBytes: 16 * 1024 * 1024,
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: cwd,
      GIT_CONFIG_NOSYSTEM: "1",
      GIT_CONFIG_GLOBAL: "/dev/null",
      LC_ALL: "C",
      TZ: "UTC",
      GIT_AUTHOR_DATE: DATE,
      GIT_COMMITTER_DATE: DATE,
      ...IDENTITY,
    },
  });
  return stdout.toString("utf8").trim();
}

/** Writes one repository's files and commits them; returns the commit id. */
export async function makeRepository(dir: string, files: Record<string, FileSpec>): Promise<string> {
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  await run(dir, ["init", "-q", "-b", "main"]);
  for (const [path, spec] of Object.entries(files).sort(([a], [b]) => (a < b ? -1 : 1))) {
    const full = join(dir, path);
    await mkdir(dirname(full), { recursive: true });
    if (typeof spec === "string") await writeFile(full, spec, { mode: 0o644 });
    else await symlink(spec.symlink, full);
  }
  await run(dir, ["add", "-A"]);
  await run(dir, ["-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", "Demo corpus"]);
  return run(dir, ["rev-parse", "HEAD"]);
}

/** Creates the three demo repositories under `root`; returns name -> { dir, commit }. */
export async function makeDemoCorpus(root: string): Promise<Record<string, { dir: string; commit: string }>> {
  const out: Record<string, { dir: string; commit: string }> = {};
  for (const [name, files] of Object.entries(DEMO_REPOSITORIES)) {
    const dir = join(root, name);
    out[name] = { dir, commit: await makeRepository(dir, files) };
  }
  return out;
}
