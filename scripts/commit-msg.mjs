#!/usr/bin/env node
// The commit-msg check (CONTRIBUTING.md, "Commits"): `node scripts/commit-msg.mjs MESSAGE_FILE`, run by
// git through .githooks/commit-msg. Refuses, with exit 1 and a message saying what to do, a subject
// (the first line git keeps) longer than 72 characters, and a subject wrapped onto a second line (git
// joins a subject's paragraph into one line, so `git log --oneline` would show it whole).
//
// Allowed as they are: the subjects git writes itself for a merge (`Merge branch 'x' into y`, at any
// length, since a branch name may be long), and the prefixes of `git commit --fixup/--squash`
// (`fixup! `, `squash! `, `amend! `) and of `git revert` (`Revert "…"`), which are checked without the
// prefix: the subject they repeat is the one that had to fit.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

export const MAX_SUBJECT = 72;

/** Git's own merge subjects: `Merge branch 'a'`, `Merge branches 'a' and 'b'`, `… of URL`, `… into b`. */
const GIT_MERGE = /^Merge (branch|branches|remote-tracking branch|remote-tracking branches|tag|tags|commit|commits|pull request) \S.*$/;

/** Control characters shown as escapes, so a message that echoes the subject cannot move the cursor. */
const visible = (s) => s.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

/**
 * The lines git keeps of a message file as the hook sees it (before git's own clean-up): without
 * comment lines, without what follows the scissors line of `git commit -v`, without leading blank lines.
 */
export function messageLines(text) {
  const lines = [];
  for (const line of text.replace(/\r\n/g, "\n").split("\n")) {
    if (/^# -+ >8 -+$/.test(line)) break;
    if (line.startsWith("#")) continue;
    if (lines.length === 0 && line.trim() === "") continue;
    lines.push(line.replace(/\s+$/, ""));
  }
  return lines;
}

/** The problem with a commit message, or null when it may be committed. */
export function commitMessageProblem(text) {
  const lines = messageLines(text);
  if (lines.length === 0) return null; // git refuses an empty message itself
  const subject = lines[0];
  if (GIT_MERGE.test(subject) && !subject.includes(": ")) return null;
  let core = subject;
  for (;;) {
    const prefix = /^(fixup|squash|amend)! /.exec(core);
    if (!prefix) break;
    core = core.slice(prefix[0].length);
  }
  const revert = /^Revert "(.*)"$/.exec(core);
  if (revert) core = revert[1];
  const length = [...core].length;
  if (length > MAX_SUBJECT) {
    const shown = [...core];
    return [
      `commit-msg: the subject is ${length} characters; at most ${MAX_SUBJECT} are allowed (CONTRIBUTING.md, "Commits").`,
      `  ${visible(shown.slice(0, MAX_SUBJECT).join(""))}  <-- the 72nd character; cut: ${visible(shown.slice(MAX_SUBJECT).join(""))}`,
      "Say what changed in the subject; put the why, the measurements and what you left alone in the body, after a blank line.",
    ].join("\n");
  }
  if (lines.length > 1 && lines[1] !== "") {
    return [
      'commit-msg: the subject runs onto a second line; git would join them into one subject (CONTRIBUTING.md, "Commits").',
      `  ${visible(subject)}`,
      `  ${visible(lines[1])}`,
      `Keep the subject on one line of at most ${MAX_SUBJECT} characters and leave a blank line before the body.`,
    ].join("\n");
  }
  return null;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const file = process.argv[2];
  if (!file) {
    process.stderr.write("commit-msg: usage: node scripts/commit-msg.mjs MESSAGE_FILE (git passes the file)\n");
    process.exit(2);
  }
  const problem = commitMessageProblem(readFileSync(file, "utf8"));
  if (problem) {
    process.stderr.write(`${problem}\nYour message is kept in ${file}; edit it with: git commit -e -F ${file}\n`);
    process.exit(1);
  }
}
