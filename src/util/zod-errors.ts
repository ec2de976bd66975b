import type { z } from "zod";
import { jsonLiteral } from "./printable.ts";

/** `tasks[3].sources[0]` from a zod issue path; a key that is not a plain name is a JSON literal, escaped (contract R189). */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else if (typeof key === "string" && /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key)) out += out ? `.${key}` : key;
    else out += `[${jsonLiteral(String(key))}]`;
  }
  return out || "(top level)";
}

/** One line per issue: `field.path: message`, with zod's generic wording made actionable. */
export function formatIssues(issues: readonly z.core.$ZodIssue[]): string[] {
  return issues.map((issue) => {
    const where = formatPath(issue.path);
    if (issue.code === "unrecognized_keys") {
      return `${where}: unknown field${issue.keys.length > 1 ? "s" : ""} ${issue.keys.map((k) => `'${k}'`).join(", ")}; remove ${issue.keys.length > 1 ? "them" : "it"} or check the spelling`;
    }
    if (issue.code === "invalid_type" && /received undefined/.test(issue.message)) {
      return `${where}: is required (${issue.message.replace(/^Invalid input: /, "")})`;
    }
    return `${where}: ${issue.message}`;
  });
}
