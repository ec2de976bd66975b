import { z } from "zod";
import { formatByteBound, PROMPT_LIMIT_BYTES, QUESTION_LIMIT_BYTES } from "../terms/limits.ts";
import { printable } from "../util/printable.ts";

/**
 * The study manifest. Field names follow the maintainer's minimal-study manifest
 * (`version`, `repetitions`, `scenarios`, `repositories`, `tasks[]`); `answerKeys` is
 * this runner's optional addition. Objects are strict: an unknown field is a typo,
 * not something to ignore silently.
 */

export const COMMIT_RE = /^[0-9a-f]{40}$/;
const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** A relative path inside a repository that cannot escape it or name a hidden file. */
export function unsafePathReason(path: string): string | undefined {
  if (path.length === 0) return "is empty";
  if (path.includes("\0")) return "contains a NUL byte";
  if (path.startsWith("/") || /^[A-Za-z]:[\\/]/.test(path)) return "is absolute; give a path relative to the repository root";
  if (path.includes("\\")) return "contains a backslash; use / between components";
  for (const part of path.split("/")) {
    if (part === "") return "has an empty component (// or a trailing /)";
    if (part === "..") return "contains '..'; paths must stay inside the repository";
    if (part.startsWith(".")) return `has the dot-component '${part}'; hidden files are never exported to the agent`;
  }
  return undefined;
}

export const SafePath = z.string().superRefine((p, ctx) => {
  const reason = unsafePathReason(p);
  if (reason) ctx.addIssue({ code: "custom", message: `'${printable(p)}' ${reason}` });
});

const Commit = z.string().regex(COMMIT_RE, "must be a full 40-character lowercase hex commit id (get it with `git rev-parse HEAD` in the checkout)");

const RepoName = z.string().regex(NAME_RE, "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit");

export const TaskSchema = z.strictObject({
  id: z.string().regex(NAME_RE, "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"),
  repository: RepoName,
  category: z.string().min(1, "must name the task's category"),
  question: z
    .string()
    .min(1, "must hold the question asked of the agent")
    .refine((q) => Buffer.byteLength(q, "utf8") <= QUESTION_LIMIT_BYTES, `is longer than ${QUESTION_LIMIT_BYTES} bytes; the whole prompt is limited to ${formatByteBound(PROMPT_LIMIT_BYTES)}`),
  sources: z.array(SafePath).min(1, "must list at least one source file that answers the question"),
  expected: z.array(z.string().min(1, "must not be empty")).min(1, "must list at least one expected proposition"),
});

/**
 * The plan is built in memory before anything is checked or run, so an absurd count (a typo, a
 * hostile file) must be refused here: measured, repetitions 1e9 exhausted the heap in planStudy
 * (contract R3, found by the manifest fuzz). The full study is 36 attempts (contract R4); these bounds are far above any
 * paid study.
 */
export const MAX_REPETITIONS = 1000;
export const MAX_ATTEMPTS = 100_000;

export const ManifestSchema = z
  .strictObject({
    $schema: z.string().optional(),
    title: z.string().optional(),
    description: z.string().optional(),
    version: z.union([z.string().min(1), z.number().int().nonnegative()]),
    repetitions: z.number().int("must be a whole number").min(1, "must be at least 1").max(MAX_REPETITIONS, `must be at most ${MAX_REPETITIONS}`),
    scenarios: z
      .array(z.string().regex(NAME_RE, "must be a short name such as 'repository-only' or 'doc-bridge'"))
      .length(2, "must name exactly two scenarios: the repository-only arm first, then the doc-bridge (MCP) arm"),
    repositories: z.record(RepoName, Commit),
    tasks: z.array(TaskSchema).min(1, "must list at least one task"),
    /** Paths per repository that hold answer keys; no export ever contains them. */
    answerKeys: z.record(RepoName, z.array(SafePath)).optional(),
  })
  .superRefine((m, ctx) => {
    const attempts = m.tasks.length * m.repetitions * m.scenarios.length;
    if (attempts > MAX_ATTEMPTS) {
      ctx.addIssue({
        code: "custom",
        path: ["tasks"],
        message: `${m.tasks.length} tasks x ${m.repetitions} repetitions x ${m.scenarios.length} scenarios is ${attempts} attempts; at most ${MAX_ATTEMPTS} are planned`,
      });
    }
    if (m.scenarios.length === 2 && m.scenarios[0] === m.scenarios[1]) {
      ctx.addIssue({ code: "custom", path: ["scenarios", 1], message: "must differ from scenarios[0]" });
    }
    const pinned = new Set(Object.keys(m.repositories));
    const used = new Set<string>();
    const seen = new Map<string, number>();
    m.tasks.forEach((task, i) => {
      const first = seen.get(task.id);
      if (first !== undefined) {
        ctx.addIssue({ code: "custom", path: ["tasks", i, "id"], message: `duplicates tasks[${first}].id '${task.id}'; task ids must be unique` });
      } else seen.set(task.id, i);
      used.add(task.repository);
      if (!pinned.has(task.repository)) {
        ctx.addIssue({
          code: "custom",
          path: ["tasks", i, "repository"],
          message: `'${printable(task.repository)}' is not pinned; add it to "repositories" with its 40-hex commit, or use one of: ${[...pinned].join(", ") || "(none)"}`,
        });
      }
    });
    for (const name of pinned) {
      if (!used.has(name)) {
        ctx.addIssue({ code: "custom", path: ["repositories", name], message: `is pinned but no task uses it; remove it or add a task` });
      }
    }
    for (const name of Object.keys(m.answerKeys ?? {})) {
      if (!pinned.has(name)) {
        ctx.addIssue({ code: "custom", path: ["answerKeys", name], message: `names a repository that is not pinned in "repositories"` });
      }
    }
  });

export type Manifest = z.infer<typeof ManifestSchema>;
export type Task = z.infer<typeof TaskSchema>;
