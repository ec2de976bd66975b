import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { basename } from "node:path";

/**
 * The one way the runner starts a child process outside the container runtime: an executable and
 * an argument array (never a shell string), and a count per command name, so that what a command
 * promises about its children (the dry run: git only, no Claude process) is a measurement.
 * Containers are started only through the runtime port and are not children of this process.
 */

const started = new Map<string, number>();

/** How many children each command name (the executable's file name) has started in this process. */
export function childProcessCounts(): Record<string, number> {
  return Object.fromEntries([...started].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

export interface StartOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
}

/**
 * Starts a child with stdin, stdout and stderr piped, for a caller that streams to and from it
 * (git cat-file --batch, an MCP engine). The caller ends stdin when it has nothing to send.
 */
export function startChild(command: string, args: readonly string[], options: StartOptions = {}): ChildProcessWithoutNullStreams {
  const name = basename(command);
  started.set(name, (started.get(name) ?? 0) + 1);
  return spawn(command, [...args], { cwd: options.cwd, env: options.env, stdio: ["pipe", "pipe", "pipe"], shell: false, windowsHide: true });
}

export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Written to stdin, which is then closed; without it stdin is closed from the start. */
  input?: string | Buffer;
  /** Killed (SIGKILL) after this long. */
  timeoutMs: number;
  /** stdout and stderr together; past it the child is killed and the result is `truncated`. */
  maxOutputBytes: number;
}

export interface ChildResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: Buffer;
  timedOut: boolean;
  truncated: boolean;
}

/** A child that did not start, exited non-zero, timed out or overflowed its output bound. */
export class ChildProcessError extends Error {
  override readonly name = "ChildProcessError";
  /** The spawn errno (ENOENT, EACCES) when it did not start, else the exit code. */
  readonly code: string | number | null;
  constructor(
    message: string,
    readonly result: ChildResult | null,
    code: string | number | null,
  ) {
    super(message);
    this.code = code;
  }
  get stdout(): string {
    return this.result?.stdout.toString("utf8") ?? "";
  }
  get stderr(): string {
    return this.result?.stderr.toString("utf8") ?? "";
  }
}

/** Runs a child to its end with bounded output and time; resolves with its result whatever its exit. */
export function runChildResult(command: string, args: readonly string[], options: RunOptions): Promise<ChildResult> {
  return new Promise((resolve, reject) => {
    const child = startChild(command, args, { cwd: options.cwd, env: options.env });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let bytes = 0;
    let truncated = false;
    let timedOut = false;
    const take = (into: Buffer[]) => (chunk: Buffer) => {
      if (truncated) return;
      const room = options.maxOutputBytes - bytes;
      if (chunk.length > room) {
        into.push(chunk.subarray(0, Math.max(0, room)));
        bytes = options.maxOutputBytes;
        truncated = true;
        child.kill("SIGKILL");
        return;
      }
      into.push(chunk);
      bytes += chunk.length;
    };
    child.stdout.on("data", take(out));
    child.stderr.on("data", take(err));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, options.timeoutMs);
    child.on("error", (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      reject(new ChildProcessError(`${basename(command)} did not start: ${e.message}`, null, e.code ?? null));
    });
    child.on("close", (exitCode, signal) => {
      clearTimeout(timer);
      resolve({ exitCode, signal, stdout: Buffer.concat(out), stderr: Buffer.concat(err), timedOut, truncated });
    });
    // Closed at once without input: a child that reads stdin sees its end, never a hang.
    child.stdin.on("error", () => {});
    child.stdin.end(options.input);
  });
}

/** As runChildResult, but anything other than a clean exit 0 throws ChildProcessError naming the command and its stderr. */
export async function runChild(command: string, args: readonly string[], options: RunOptions): Promise<ChildResult> {
  const result = await runChildResult(command, args, options);
  const what = `${basename(command)} ${args.join(" ")}`;
  const stderr = result.stderr.toString("utf8").trim();
  if (result.timedOut) throw new ChildProcessError(`Command timed out after ${options.timeoutMs} ms: ${what}`, result, null);
  if (result.truncated) throw new ChildProcessError(`Command output exceeded ${options.maxOutputBytes} bytes: ${what}`, result, null);
  if (result.exitCode !== 0) {
    const how = result.exitCode === null ? `killed by ${result.signal}` : `exit ${result.exitCode}`;
    throw new ChildProcessError(`Command failed (${how}): ${what}${stderr ? `\n${stderr}` : ""}`, result, result.exitCode);
  }
  return result;
}
