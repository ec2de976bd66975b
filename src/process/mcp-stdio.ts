import type { ChildProcess } from "node:child_process";
import { PassThrough } from "node:stream";
import { getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ReadBuffer, serializeMessage } from "@modelcontextprotocol/sdk/shared/stdio.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { startChild } from "./child.ts";

/**
 * An MCP client transport over a child's stdio, started through the runner's one child-process
 * module (the SDK's own StdioClientTransport spawns on its own, out of sight of the counts). Same
 * environment rule as the SDK's: its safe defaults, overlaid by `env`.
 */
export class ChildStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  private child: ChildProcess | undefined;
  private readonly buffer = new ReadBuffer();
  private readonly stderrStream = new PassThrough();
  /** How the child ended, once it has: its exit code, or the signal that ended it. */
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;

  constructor(private readonly params: { command: string; args: readonly string[]; cwd: string; env: Record<string, string> }) {}

  /** The child's stderr, available before start so no early output is lost. */
  get stderr(): PassThrough {
    return this.stderrStream;
  }

  start(): Promise<void> {
    if (this.child) throw new Error("ChildStdioTransport already started");
    return new Promise((resolve, reject) => {
      const child = startChild(this.params.command, this.params.args, {
        cwd: this.params.cwd,
        env: { ...getDefaultEnvironment(), ...this.params.env },
      });
      this.child = child;
      child.on("error", (error) => {
        reject(error);
        this.onerror?.(error);
      });
      child.on("spawn", () => resolve());
      child.on("close", (code, signal) => {
        this.exit = { code, signal };
        this.child = undefined;
        this.onclose?.();
      });
      child.stdin.on("error", (error) => this.onerror?.(error));
      child.stdout.on("data", (chunk: Buffer) => {
        try {
          this.buffer.append(chunk);
          for (let m = this.buffer.readMessage(); m !== null; m = this.buffer.readMessage()) this.onmessage?.(m);
        } catch (error) {
          this.onerror?.(error as Error);
        }
      });
      child.stderr.pipe(this.stderrStream);
    });
  }

  send(message: JSONRPCMessage): Promise<void> {
    return new Promise((resolve) => {
      const stdin = this.child?.stdin;
      if (!stdin) throw new Error("not connected");
      if (stdin.write(serializeMessage(message))) resolve();
      else stdin.once("drain", resolve);
    });
  }

  async close(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    this.buffer.clear();
    if (!child) return;
    const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
    const wait = (ms: number) => Promise.race([closed, new Promise<void>((resolve) => setTimeout(resolve, ms).unref())]);
    child.stdin?.end();
    await wait(2000);
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      await wait(2000);
    }
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }
}
