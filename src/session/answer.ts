import { UsageError } from "../util/errors.ts";
import type { SessionLedger } from "./schema.ts";
import { readSessionLedger, writeSessionLedger } from "./store.ts";

/** Records a person's answer to the session's open question; the session becomes ready to resume. */
export async function answerSession(ledgerPath: string, sessionId: string, text: string, deps: { now?: () => Date } = {}): Promise<SessionLedger> {
  const ledger = await readSessionLedger(ledgerPath);
  const session = ledger.sessions.find((s) => s.id === sessionId || s.taskId === sessionId);
  if (!session) throw new UsageError(`the ledger has no session ${sessionId}; give a session id (or task id) that \`study-runner sessions status\` lists`);
  if (session.state !== "awaiting-answer") throw new UsageError(`session ${session.id} (${session.taskId}) is ${session.state}, not awaiting an answer`);
  if (text.trim() === "" || Buffer.byteLength(text, "utf8") > 4096 || text.includes("\0")) throw new UsageError("the answer must be non-empty text of at most 4096 bytes without NUL bytes");
  const q = session.questions.at(-1)!;
  q.answer = { source: "person", text, answeredAt: (deps.now?.() ?? new Date()).toISOString() };
  session.state = "answered";
  await writeSessionLedger(ledgerPath, ledger);
  return ledger;
}
