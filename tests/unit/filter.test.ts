import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { createHash } from "node:crypto";
import { adjudicatorFilterOptions, LOCKFILES, MAX_PUBLIC_BYTES, normalizedDigest, publicFilter } from "../../src/corpus/filter.ts";
import { exclusionReason } from "../support/path-reason.ts";
import type { TreeEntry } from "../../src/corpus/git.ts";

const OID = "0123456789abcdef0123456789abcdef01234567";

function blob(path: string, size = 10, mode = "100644"): TreeEntry {
  return { mode, type: "blob", oid: OID, size, path, rawPath: Buffer.from(path, "utf8") };
}

describe("public-path filter", () => {
  it("passes ordinary files, executables, CLAUDE.md, AGENTS.md and non-ASCII names", () => {
    for (const path of ["README.md", "src/a/b/c.ts", "CLAUDE.md", "AGENTS.md", "pkg/CLAUDE.md", "docs/guía rápida.md", "has space.txt"]) {
      expect(exclusionReason(blob(path)), path).toBeUndefined();
    }
    expect(exclusionReason(blob("bin/run.sh", 10, "100755"))).toBeUndefined();
  });

  it("keeps out symlinks, submodules and anything that is not a regular blob", () => {
    expect(exclusionReason(blob("link", 4, "120000"))).toBe("not-a-regular-file");
    expect(exclusionReason({ mode: "160000", type: "commit", oid: OID, size: undefined, path: "vendor/sub", rawPath: Buffer.from("vendor/sub") })).toBe("not-a-regular-file");
    // A legacy group-writable mode is not one of the two regular-file modes.
    expect(exclusionReason(blob("old.txt", 4, "100664"))).toBe("not-a-regular-file");
  });

  it("keeps out a path whose bytes are not UTF-8", () => {
    const rawPath = Buffer.from([0x66, 0xff, 0x2e, 0x74, 0x78, 0x74]);
    expect(exclusionReason({ ...blob(rawPath.toString("utf8")), rawPath })).toBe("not-utf8-path");
  });

  it("keeps out every path with a dot-component, at any depth", () => {
    for (const path of [".env", ".github/workflows/ci.yml", "src/.secret/key.txt", "a/b/.eslintrc", ".doc-bridge/index.json"]) {
      expect(exclusionReason(blob(path)), path).toBe("hidden");
    }
    fc.assert(
      fc.property(
        fc.array(fc.stringMatching(/^[a-z0-9 _-]{1,8}$/), { maxLength: 3 }),
        fc.stringMatching(/^\.[a-z0-9._-]{0,8}$/),
        fc.array(fc.stringMatching(/^[a-z0-9 _-]{1,8}$/), { maxLength: 3 }),
        (before, dot, after) => exclusionReason(blob([...before, dot, ...after].join("/"))) === "hidden",
      ),
    );
  });

  it("keeps out dependency and build folders at any depth, but not names that merely contain them", () => {
    for (const path of ["node_modules/x/index.js", "dist/bundle.js", "build/out.o", "coverage/lcov.info", "packages/a/node_modules/y.js", "web/dist/app.js"]) {
      expect(exclusionReason(blob(path)), path).toBe("build-or-dependency-dir");
    }
    for (const path of ["distribution/x.md", "src/builder.ts", "dist.md", "coverage.md", "my_node_modules/a.js"]) {
      expect(exclusionReason(blob(path)), path).toBeUndefined();
    }
  });

  it("keeps out every lockfile by name at any depth, but not the manifests beside them", () => {
    for (const name of LOCKFILES) {
      expect(exclusionReason(blob(name)), name).toBe("lockfile");
      expect(exclusionReason(blob(`sub/dir/${name}`)), name).toBe("lockfile");
    }
    for (const path of ["package.json", "go.mod", "Cargo.toml", "yarn.lock.md"]) expect(exclusionReason(blob(path)), path).toBeUndefined();
  });

  it("keeps out answer keys (a file or a whole folder) and the manifest, and only those", () => {
    const opts = { answerKeys: ["answers", "notes/key.md"], manifestPaths: ["study/manifest.json"] };
    expect(exclusionReason(blob("answers/q1.md"), opts)).toBe("answer-key");
    expect(exclusionReason(blob("answers"), opts)).toBe("answer-key");
    expect(exclusionReason(blob("notes/key.md"), opts)).toBe("answer-key");
    expect(exclusionReason(blob("answers-public/q1.md"), opts)).toBeUndefined();
    expect(exclusionReason(blob("notes/key.md.txt"), opts)).toBeUndefined();
    expect(exclusionReason(blob("study/manifest.json"), opts)).toBe("manifest");
    expect(exclusionReason(blob("study/manifest.json"))).toBeUndefined();
    expect(exclusionReason(blob("study/other.json"), opts)).toBeUndefined();
  });

  it("keeps the CLI's instruction files for attempts, and keeps every one of them out of the adjudicator's export", () => {
    const loaded = ["CLAUDE.md", "CLAUDE.local.md", "sub/CLAUDE.md", "AGENTS.md", "docs/claude.md", "Agents.MD", "deep/a/b/CLAUDE.local.md"];
    for (const path of loaded) {
      expect(exclusionReason(blob(path)), path).toBeUndefined();
      expect(exclusionReason(blob(path), adjudicatorFilterOptions({})), path).toBe("instruction-file");
    }
    // .claude/ (rules, memory, settings) is a dot-folder: out of every export already.
    expect(exclusionReason(blob(".claude/rules/style.md"), adjudicatorFilterOptions({}))).toBe("hidden");
    for (const path of ["README.md", "docs/CLAUDE-notes.md", "claude.mdx", "src/agents.ts"]) expect(exclusionReason(blob(path), adjudicatorFilterOptions({})), path).toBeUndefined();
    // The answer keys and the manifest stay out too: it is the attempts' filter plus one rule.
    expect(exclusionReason(blob("answers/q1.md"), adjudicatorFilterOptions({ answerKeys: ["answers"] }))).toBe("answer-key");
  });

  it(`keeps out blobs over ${MAX_PUBLIC_BYTES} bytes and keeps one of exactly that size`, () => {
    expect(MAX_PUBLIC_BYTES).toBe(200_000);
    expect(exclusionReason(blob("big.bin", 200_000))).toBeUndefined();
    expect(exclusionReason(blob("big.bin", 200_001))).toBe("too-large");
    expect(exclusionReason({ ...blob("nosize.bin"), size: undefined })).toBe("too-large");
  });

  it("the filter over a tree keeps exactly the entries without an exclusion reason", () => {
    const entries = [blob("a.md"), blob(".env"), blob("dist/x.js"), blob("b.md", 200_001), blob("CLAUDE.md")];
    const filter = publicFilter(entries);
    expect(entries.filter((e) => filter.reason(e) === undefined).map((e) => e.path)).toEqual(["a.md", "CLAUDE.md"]);
  });
});

/** The normal form as docs/export.md states it, on the decoded text: the reference the digest must match. */
function referenceDigest(data: Buffer): string | undefined {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(data);
  } catch {
    return data.length ? createHash("sha256").update("raw\0").update(data).digest("hex") : undefined;
  }
  const normal = text
    .replace(/^\uFEFF/, "")
    .normalize("NFC")
    .replace(/\r\n?/g, "\n")
    .replace(/[^\S\n]+$/gm, "")
    .replace(/\n+$/, "");
  return normal === "" ? undefined : createHash("sha256").update("text\0").update(normal, "utf8").digest("hex");
}

describe("the answer-key copies' normal form", () => {
  it("digests any bytes as the normalization on the decoded text does (blanks at line ends, final newlines, CR, BOM, NFC)", () => {
    const pieces = ["a", "b", " ", "\t", "\v", "\f", "\n", "\r", "\r\n", "\u00a0", "\ufeff", "e\u0301", "é", "\u2028", "\x00", "\x1f", "x y", "\n\n"];
    const cases: Buffer[] = [Buffer.alloc(0), Buffer.from(" \n\t\n"), Buffer.from([0xff, 0x0a]), Buffer.from("line  \nnext\t\n\n")];
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...pieces), { maxLength: 30 }), (parts) => {
        const data = Buffer.from(parts.join(""), "utf8");
        expect(normalizedDigest(data)).toBe(referenceDigest(data));
      }),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        const data = Buffer.from(bytes);
        expect(normalizedDigest(data)).toBe(referenceDigest(data));
      }),
      { numRuns: 2000 },
    );
    for (const data of cases) expect(normalizedDigest(data)).toBe(referenceDigest(data));
    // Blanks at line ends and final newlines do not change it; other bytes do.
    expect(normalizedDigest(Buffer.from("x = 1;  \ny = 2;\n\n"))).toBe(normalizedDigest(Buffer.from("x = 1;\r\ny = 2;")));
    expect(normalizedDigest(Buffer.from("x = 1;\ny = 2;"))).not.toBe(normalizedDigest(Buffer.from("x = 1;\ny = 3;")));
  });
});
