import type { Ledger } from "../ledger/schema.ts";
import { DOC_BRIDGE_ALLOWED, DOC_BRIDGE_SERVER } from "../claude/args.ts";

/**
 * Blinding (contract R87: the adjudicator is blind to scenario identity). The prompt
 * never names a scenario, and the answer is shown in a neutral form: both arms' vocabularies
 * become the same MASK, so the mask itself tells nothing. Masked: the scenario names, the
 * doc-bridge server, its tools (as the server lists them, `doc.search`, and as the CLI names them,
 * `mcp__doc-bridge__doc_search`), any `mcp__*` name, the word MCP, the engine's result field
 * names, and the built-in tools both arms have (`Read`, `Grep`, `Glob`), because a repository-only
 * answer names those and nothing else. Before matching, the text is rewritten into a neutral
 * spelling (Unicode NFKC, every dash a '-', every dot-like mark a '.', invisible characters
 * removed, runs of spaces one space), and the words of a name may be joined by any of
 * '-', '_', '.', '/', ':' or spaces, or by nothing, in any case. Masking is lexical: an answer that
 * describes a tool in other words is not caught, which is why blinding is also measured (the
 * adjudicator's guess of the arm, src/adjudicate/blinding.ts).
 */

export const MASK = "[masked]";

export interface MaskTerm {
  /** Shown in the record and the docs. */
  label: string;
  pattern: RegExp;
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Between the words of a name: a few separators of any kind, or none. */
const SEP = "[-_./:\\s]{0,3}";
const BEFORE = "(?<![\\p{L}\\p{N}])";
const AFTER = "(?![\\p{L}\\p{N}])";

/** The words of a name: split at separators and at lower-to-upper case changes (promoteDraft). */
function wordsOf(name: string): string[] {
  return name
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .split(/[-_. :/]+/)
    .filter((w) => w !== "");
}

/** A name whose words may be joined by any separator or none, in any case, as a whole word. */
function namePattern(name: string): RegExp {
  return new RegExp(`${BEFORE}${wordsOf(name).map(escapeRegExp).join(SEP)}${AFTER}`, "giu");
}

/**
 * Dashes (Unicode category Pd, the minus sign, hyphen-like marks), dot-like marks, and invisible
 * format characters that would let a name slip past a pattern written with ASCII separators.
 */
const DASHES = /[\p{Pd}\u2212\u2043\uFE63\uFF0D]/gu;
const DOTS = /[\u00B7\u2022\u2024\u2027\u2219\u22C5\u30FB\u3002\uFF0E\uFF61]/gu;
// biome-ignore lint/suspicious/noMisleadingCharacterClass: each Hangul filler is removed on its own, never as part of a syllable
const INVISIBLE = /[\p{Cf}\u034F\u115F\u1160\u3164\uFFA0]/gu;
const SPACES = /[^\S\n]+/g;

/** The neutral spelling every answer is put in before masking; the same rewrite for both arms. */
export function neutralForm(text: string): string {
  return text.normalize("NFKC").replace(INVISIBLE, "").replace(DASHES, "-").replace(DOTS, ".").replace(SPACES, " ");
}

/** The built-in tools of both arms (src/claude/args.ts BUILTIN_READ_TOOLS). */
const BUILTIN_TOOLS = ["Grep", "Glob"] as const;

/**
 * Field names of the doc-bridge engine's results (src/mcp/reference-server.ts): an answer that
 * quotes a result's JSON shows them. Masked as JSON keys ("snippet": ...) and, for the ones that
 * are not English words, anywhere.
 */
export const ENGINE_RESULT_KEYS = ["engineRevision", "matches", "snippet", "heading", "score", "pin", "source", "target", "text", "path", "id"] as const;
const ENGINE_RESULT_WORDS = ["engineRevision", "structuredContent"] as const;

/** The terms to mask for one ledger: its scenarios, both arms' tools, the doc-bridge server and its result fields. */
export function maskTerms(ledger: Pick<Ledger, "observations" | "docBridge">, scenarios: readonly string[] = []): MaskTerm[] {
  const names = new Set<string>([...scenarios, ...ledger.observations.map((o) => o.scenario)]);
  // Any MCP tool name as the CLI writes it, whatever server and tool: first, so it goes as one piece
  // (spelled with spaces, its words are caught one by one below and the masks joined).
  const terms: MaskTerm[] = [{ label: "mcp__<server>__<tool> names", pattern: new RegExp(`${BEFORE}mcp[-_.:]{1,3}[A-Za-z0-9-]+[-_.:]{1,3}[A-Za-z0-9_.-]+`, "giu") }];
  // Longest first, so that "repository-only" is replaced before a shorter overlapping term.
  for (const name of [...names].sort((a, b) => b.length - a.length)) terms.push({ label: `scenario ${name}`, pattern: namePattern(name) });
  const tools = new Set<string>(DOC_BRIDGE_ALLOWED.map((t) => t.replaceAll(".", "_")));
  const prefix = `mcp__${DOC_BRIDGE_SERVER}__`;
  for (const name of ledger.docBridge?.denyList ?? []) if (name.startsWith(prefix)) tools.add(name.slice(prefix.length));
  for (const o of ledger.observations) {
    for (const name of Object.keys(o.toolCallsByName)) if (name.startsWith(prefix)) tools.add(name.slice(prefix.length));
    for (const name of o.tools ?? []) if (name.startsWith(prefix)) tools.add(name.slice(prefix.length));
  }
  for (const tool of [...tools].sort((a, b) => b.length - a.length)) terms.push({ label: `doc-bridge tool ${tool}`, pattern: namePattern(tool) });
  terms.push({ label: `server ${DOC_BRIDGE_SERVER}`, pattern: namePattern(DOC_BRIDGE_SERVER) });
  terms.push({ label: "the word MCP", pattern: namePattern("MCP") });
  // Quotes and all, before the bare words, so a quoted key looks the same whichever field it was.
  terms.push({ label: "engine result fields as JSON keys", pattern: new RegExp(`["']?${BEFORE}(?:${[...ENGINE_RESULT_WORDS, ...ENGINE_RESULT_KEYS].join("|")})${AFTER}["']?(?=\\s*:)`, "gu") });
  for (const word of ENGINE_RESULT_WORDS) terms.push({ label: `engine result field ${word}`, pattern: namePattern(word) });
  for (const tool of BUILTIN_TOOLS) terms.push({ label: `built-in tool ${tool}`, pattern: namePattern(tool) });
  // "read" is an English verb in every answer; the tool is the capitalized word (or all capitals).
  terms.push({ label: "built-in tool Read", pattern: new RegExp(`${BEFORE}(?:Read|READ)${AFTER}`, "gu") });
  return terms;
}

export interface MaskedText {
  text: string;
  /** label -> replacements made. */
  counts: Record<string, number>;
}

const ADJACENT_MASKS = new RegExp(`${escapeRegExp(MASK)}(?:[-_./:\\s]{0,3}${escapeRegExp(MASK)})+`, "g");

/** Puts the text in its neutral form, then replaces every term, in order, by MASK. */
export function maskText(text: string, terms: readonly MaskTerm[]): MaskedText {
  const counts: Record<string, number> = {};
  let out = neutralForm(text);
  for (const term of terms) {
    let n = 0;
    out = out.replace(term.pattern, () => {
      n++;
      return MASK;
    });
    if (n > 0) counts[term.label] = (counts[term.label] ?? 0) + n;
  }
  // Two names side by side ("doc.search / Grep") read as one masked phrase in either arm.
  out = out.replace(ADJACENT_MASKS, MASK);
  return { text: out, counts };
}
