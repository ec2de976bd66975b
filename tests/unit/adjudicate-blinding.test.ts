import { describe, expect, it } from "vitest";
import { armGuessOf, blindingSummary, clopperPearson } from "../../src/adjudicate/blinding.ts";
import { MASK, maskTerms, maskText, neutralForm } from "../../src/adjudicate/mask.ts";

const ledger = {
  observations: [
    { scenario: "repository-only", toolCallsByName: { Grep: 2, Read: 1 }, tools: ["Glob", "Grep", "Read"] },
    {
      scenario: "doc-bridge",
      toolCallsByName: { "mcp__doc-bridge__doc_search": 1 },
      tools: ["Glob", "Grep", "Read", "mcp__doc-bridge__doc_search", "mcp__doc-bridge__doc_get", "mcp__doc-bridge__handoff_resolve"],
    },
  ],
  docBridge: { engineRevision: "r", bundleHash: null, denyList: ["mcp__doc-bridge__gate_status", "mcp__doc-bridge__memory_promoteDraft"] },
} as never;
const terms = maskTerms(ledger, ["repository-only", "doc-bridge"]);

/** One answer per arm, the same sentence with each arm's own vocabulary in the slots. */
function answers(slots: readonly [string, string][]): [string, string] {
  const template = (pick: 0 | 1) =>
    `In the ${slots[0]![pick]} run I first used ${slots[1]![pick]} to find the rounding rule, then ${slots[2]![pick]} on docs/rounding.md.\n` +
    `The result (${slots[3]![pick]}) shows half-even rounding; see src/round.ts. ${slots[4]![pick]} confirmed it.`;
  return [template(0), template(1)];
}

describe("blinding: symmetric masking", () => {
  it("masks an answer that names each arm's vocabulary in variant spellings identically for both arms", () => {
    // [repository-only arm, doc-bridge arm], each spelled with a case, dash, dot, space or invisible-character variant.
    const variants: Array<[string, string][]> = [
      [
        ["repository-only", "doc-bridge"],
        ["Grep", "doc.search"],
        ["Read", "doc_get"],
        ['"path": "x"', '"snippet": "x"'],
        ["GLOB", "mcp__doc-bridge__doc_search"],
      ],
      [
        ["Repository\u2013Only", "Doc\u2014Bridge"],
        ["grep", "DOC\u00B7SEARCH"],
        ["READ", "doc  get"],
        ['"text": "x"', '"engineRevision": "x"'],
        ["Glob", "MCP"],
      ],
      [
        ["repository  only", "doc\u200Bbridge"],
        ["G\u200Brep", "doc\uFF0Esearch"],
        ["Read", "handoff/resolve"],
        ['"id": 1', '"matches": 1'],
        ["glob", "doc bridge"],
      ],
      [
        ["REPOSITORY_ONLY", "docbridge"],
        ["grep", "doc\u2011search"],
        ["Read", "memory promote draft"],
        ['"score": 3', '"heading": 3'],
        ["Grep", "gate.status"],
      ],
    ];
    for (const slots of variants) {
      const [repo, docs] = answers(slots);
      const a = maskText(repo, terms);
      const b = maskText(docs, terms);
      expect(a.text, JSON.stringify(slots)).toBe(b.text);
      expect(a.text).toContain(MASK);
      // The ordinary words around them survive.
      expect(a.text).toContain("half-even rounding; see src/round.ts");
    }
  });

  it("writes every answer in one neutral spelling first: NFKC, one kind of dash and dot, no invisible characters, single spaces", () => {
    expect(neutralForm("a\u2013b\u2014c\u2212d \u00B7 e\uFF0Ef\u200B\u2060g  \t h\nnext")).toBe("a-b-c-d . e.fg h\nnext");
    expect(neutralForm("\uFF44\uFF4F\uFF43")).toBe("doc");
  });

  it("leaves the English verb 'read' and ordinary words alone", () => {
    expect(maskText("I read the file and searched the docs.", terms).text).toBe("I read the file and searched the docs.");
  });
});

describe("blinding: measured", () => {
  it("gives the exact binomial (Clopper-Pearson) 95% interval of known cases", () => {
    const close = (got: [number, number], want: [number, number]) => {
      expect(got[0]).toBeCloseTo(want[0], 6);
      expect(got[1]).toBeCloseTo(want[1], 6);
    };
    // Reference values: R binom.test(k, n)$conf.int.
    close(clopperPearson(5, 10), [0.187086, 0.812914]);
    close(clopperPearson(7, 20), [0.153909, 0.592189]);
    close(clopperPearson(0, 10), [0, 0.308497]);
    close(clopperPearson(10, 10), [0.691503, 1]);
    close(clopperPearson(1, 1), [0.025, 1]);
    expect(() => clopperPearson(3, 2)).toThrow(RangeError);
  });

  it("scores each guess against the true arm and summarizes only the guesses given", () => {
    const run = (phase: "running" | "settled") => ({ phase }) as never;
    expect(armGuessOf("files-and-docs-server", "mcp", run("settled"))).toMatchObject({ guess: "files-and-docs-server", arm: "mcp", correct: true, reason: null });
    expect(armGuessOf("files-and-docs-server", "repository", run("settled"))).toMatchObject({ guess: "files-and-docs-server", arm: "repository", correct: false });
    expect(armGuessOf(null, "repository", run("settled"), "no guess: unusable")).toMatchObject({ guess: null, arm: "repository", correct: null, reason: "no guess: unusable" });
    const items = [
      { armGuess: armGuessOf("files-and-docs-server", "mcp", run("settled")) },
      { armGuess: armGuessOf("files-and-docs-server", "repository", run("settled")) },
      { armGuess: armGuessOf("files-only", "repository", run("settled")) },
      { armGuess: armGuessOf(null, "mcp", run("settled"), "no guess") },
      // A guess call still open (a killed runner) has neither guessed nor failed to.
      { armGuess: armGuessOf(null, "mcp", run("running")) },
      {},
    ];
    const s = blindingSummary(items);
    expect(s).toMatchObject({ guesses: 3, correct: 2, missing: 1 });
    expect(s.accuracy).toBeCloseTo(2 / 3, 12);
    expect(s.interval95).toEqual(clopperPearson(2, 3));
    expect(blindingSummary([])).toMatchObject({ guesses: 0, accuracy: null, interval95: null });
  });
});
