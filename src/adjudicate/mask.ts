import type { Ledger } from "../ledger/schema.ts";
import { DOC_BRIDGE_ALLOWED, DOC_BRIDGE_SERVER } from "../claude/args.ts";

/**
 * Blinding (decision record 001: the adjudicator "is blind to scenario identity"). The prompt
 * never names a scenario; the answer is shown with every term that would reveal the arm
 * replaced by MASK. Only the doc-bridge arm can use the doc-bridge server, so its name, its
 * tool names (as the server lists them, `doc.search`, and as the CLI names them,
 * `mcp__doc-bridge__doc_search`), any `mcp__*` tool name, the word MCP and the scenario names
 * would reveal the arm. The built-in tools (Read, Grep, Glob) are offered in both arms and are
 * not masked. Masking is lexical: an answer that describes the tool in other words is not caught.
 */

export const MASK = "[masked]";

export interface MaskTerm {
  /** Shown in the record and the docs. */
  label: string;
  pattern: RegExp;
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** A name written with -, _ or a space between its words (doc-bridge, doc_bridge, doc bridge, docbridge). */
function wordsPattern(name: string): string {
  return name
    .split(/[-_ ]/)
    .map(escapeRegExp)
    .join("[-_ ]?");
}

/** A tool name the server lists with dots, which the CLI writes with underscores: match both. */
function toolPattern(base: string): string {
  return base
    .split(/[._]/)
    .map(escapeRegExp)
    .join("[._]");
}

/** The terms to mask for one ledger: its scenarios, the doc-bridge server and every tool name it saw. */
export function maskTerms(ledger: Pick<Ledger, "observations" | "docBridge">, scenarios: readonly string[] = []): MaskTerm[] {
  const names = new Set<string>([...scenarios, ...ledger.observations.map((o) => o.scenario)]);
  const terms: MaskTerm[] = [];
  // Longest first, so that "repository-only" is replaced before a shorter overlapping term.
  for (const name of [...names].sort((a, b) => b.length - a.length)) {
    terms.push({ label: `scenario ${name}`, pattern: new RegExp(`(?<![A-Za-z0-9])${wordsPattern(name)}(?![A-Za-z0-9])`, "gi") });
  }
  // Any MCP tool name as the CLI writes it, whatever server and tool.
  terms.push({ label: "mcp__<server>__<tool> names", pattern: /mcp__[A-Za-z0-9_.-]+/gi });
  const tools = new Set<string>(DOC_BRIDGE_ALLOWED.map((t) => t.replaceAll(".", "_")));
  const prefix = `mcp__${DOC_BRIDGE_SERVER}__`;
  for (const name of ledger.docBridge?.denyList ?? []) if (name.startsWith(prefix)) tools.add(name.slice(prefix.length));
  for (const o of ledger.observations) {
    for (const name of Object.keys(o.toolCallsByName)) if (name.startsWith(prefix)) tools.add(name.slice(prefix.length));
    for (const name of o.tools ?? []) if (name.startsWith(prefix)) tools.add(name.slice(prefix.length));
  }
  for (const tool of [...tools].sort((a, b) => b.length - a.length)) {
    terms.push({ label: `doc-bridge tool ${tool}`, pattern: new RegExp(`(?<![A-Za-z0-9])${toolPattern(tool)}(?![A-Za-z0-9])`, "gi") });
  }
  terms.push({ label: `server ${DOC_BRIDGE_SERVER}`, pattern: new RegExp(`(?<![A-Za-z0-9])${wordsPattern(DOC_BRIDGE_SERVER)}(?![A-Za-z0-9])`, "gi") });
  terms.push({ label: "the word MCP", pattern: /(?<![A-Za-z0-9])MCP(?![A-Za-z0-9])/gi });
  return terms;
}

export interface MaskedText {
  text: string;
  /** label -> replacements made. */
  counts: Record<string, number>;
}

/** Replaces every term, in order, by MASK. */
export function maskText(text: string, terms: readonly MaskTerm[]): MaskedText {
  const counts: Record<string, number> = {};
  let out = text;
  for (const term of terms) {
    let n = 0;
    out = out.replace(term.pattern, () => {
      n++;
      return MASK;
    });
    if (n > 0) counts[term.label] = (counts[term.label] ?? 0) + n;
  }
  return { text: out, counts };
}
