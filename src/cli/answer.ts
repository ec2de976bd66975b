import { readFile } from "node:fs/promises";
import { answerSession } from "../session/answer.ts";
import { UsageError } from "../util/errors.ts";
import { sessionSummary } from "./session-summary.ts";

/** `study-runner answer`: records a person's answer; it runs nothing, so it reads no environment variable. */
export async function answerCommand(ledgerPath: string, session: string, flags: { text?: string; file?: string }): Promise<number> {
  if ((flags.text === undefined) === (flags.file === undefined)) throw new UsageError("give the answer with exactly one of --text TEXT and --file PATH");
  const text =
    flags.text ??
    (await readFile(flags.file!, "utf8").catch((err: NodeJS.ErrnoException) => {
      throw new UsageError(`cannot read --file ${flags.file} (${err.code})`);
    }));
  const ledger = await answerSession(ledgerPath, session, text);
  process.stdout.write(`${JSON.stringify(sessionSummary(ledgerPath, ledger), null, 2)}\n`);
  return 0;
}
