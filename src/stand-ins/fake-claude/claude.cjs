#!/usr/local/bin/node
// A scripted stand-in for the Claude Code CLI 2.1.296, for tests only. Plain Node, CommonJS,
// no dependencies: it runs in the `FROM scratch` fake image (Node at /usr/local/bin/node)
// and, for quick tests, directly on the host. CommonJS because it starts once per attempt and
// per probe: installed as `claude`, with no extension, an ES module was first compiled as
// CommonJS, failed, and compiled again as a module (Node 20's syntax detection); `claude
// --version` took 46-49 ms in the image against 37-40 ms (docs/performance.md).
//
// What it does, in order:
// 1. Writes a record of what it was given and what it can see to $FAKE_DIR/records/
//    (when that directory exists): argv, env variable NAMES (never values), uid/gid, cwd,
//    what is writable, network interfaces, listings of probe paths. Never a secret's value.
// 2. Reads the behaviour file $FAKE_DIR/behaviour.json (absent: behaviour "ok"):
//      { "version"?: "...", "default"?: <behaviour>, "attempts"?: { "<index>": <behaviour> } }
//    with the attempt index from $STUDY_RUNNER_ATTEMPT.
// 3. Parses argv like the real CLI's commander program (variadic flags swallow following
//    words; unknown options fail) and acts out the behaviour.
// $FAKE_DIR defaults to /fake (mounted read-only; /fake/records writable).
//
// Behaviours ({ "kind": ..., ...params }):
//   ok       a stream-json transcript generated from argv (see okTranscript); params:
//            answer, twoResults, foreignModelUsage, subtype, isError, callTool, mcpCalls,
//            turnUsage, reportedCostFactor, exitCode, version, malformedFirst (a non-JSON
//            line before init), delayMs (a pause before the answer), refreshLogin (rewrite
//            $HOME/.claude/.credentials.json with new tokens and a later expiresAt, by a new
//            file renamed into place, as the real CLI does on a refresh), connect (see
//            attemptConnections: network attempts before the transcript, outcomes recorded),
//            fillHome (write $HOME/fill until the disk refuses, keep it, record the bytes written)
//   events   print `events` verbatim (strings raw, objects as JSON); malformedFirst; exitCode
//   exit     print `events`, then exit with `code`
//   sleep    print `events`, sleep `seconds`, exit `exitCode`
//   flood    print `events`, then write stream lines endlessly, or until `bytes` have been written
//   garbage  print `lines` malformed lines (default 3), exit `exitCode`
//   oom      print `events`, then allocate memory in 8 MiB steps until the container's memory
//            limit kills it; stops at `maxMb` (default 1024) and exits `exitCode` if nothing did
// With --json-schema and --session-id or --resume (a session task, src/session), the fake plays a
// session instead (see sessionTranscript): `session` params { questions (default 1), question,
// edits: [{ path, content } | { path, append }, with `call` n: made in that call, else in the call
// that says done], sessionId (report another id), resultSessionId (null: no session_id in the result; a string: that id in the result only), failResume, turnUsage, delayMs,
// viaApi (send one Messages API request through ANTHROPIC_BASE_URL, the runner's gateway, and report its reply's id and usage),
// reportedCostFactor (total_cost_usd is the call's cost times this) }; the prompt may come on stdin, as the real CLI accepts it.
// With --json-schema (the adjudicator), the ok transcript's answer is what that schema asks for:
// a verdict: `verdicts` (item id from the prompt's "Item: <id>" line -> verdict fields), else
// `verdict`, else a correct verdict over the prompt's P1..Pn; or, when the schema asks for
// `armGuess` alone (the separate arm-guess call), { armGuess }: `guesses` (item id -> guess), else
// "files-and-docs-server" when the answer shows a masked word, else "files-only"; `guessDelayMs`
// pauses that call alone before it answers. It goes into the
// result's `structured_output` (unless `structuredOutput: false`) and, as JSON text, into `result`
// (unless `answer` is given).

"use strict";
const { spawn } = require("node:child_process");
const http = require("node:http");
const net = require("node:net");
const { randomUUID } = require("node:crypto");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

const DEFAULT_VERSION = "2.1.296";
const FAKE_DIR = process.env.FAKE_CLAUDE_DIR ?? "/fake";
const DEFAULT_MODEL = "claude-sonnet-5";
const DEFAULT_ANSWER = "The fake Claude Code looked at the workspace and answers with this fixed text.";
const PROBE_PATHS = ["/", "/workspace", "/run/study-runner", "/home", "/tmp"];

// USD per million tokens: the runner's measured table of the pinned CLI, baked into the image
// (src/image/specs.ts FAKE_PRICES_PATH), rows { tier1, tier2 | null, tier1MaxPromptTokens | null }.
// A model without a row is priced 0 with costBasis "unknown", as the real CLI marks it.
const PRICES_FILE = process.env.FAKE_CLAUDE_PRICES ?? "/opt/study-runner/cli-prices.json";
let PRICES = {};
try {
  PRICES = JSON.parse(fs.readFileSync(PRICES_FILE, "utf8"));
} catch {
  // No table: every model is "unknown".
}

// The init events the pinned CLI writes, measured per kind of run (src/claude/init-events.generated.ts,
// baked into the image by src/image/specs.ts FAKE_INIT_PATH): the fake's init is that data with the
// fields its own argv and run set, so that it is never a hand-kept copy of the measurement.
const INIT_FILE = process.env.FAKE_CLAUDE_INIT ?? "/opt/study-runner/cli-init.json";
let INIT_EVENTS = null;
try {
  INIT_EVENTS = JSON.parse(fs.readFileSync(INIT_FILE, "utf8"));
} catch {
  // No data: the init holds only the fields the fake derives itself.
}

/** Which kind of run the runner started, from its argv (src/claude/init-expectation.ts INIT_KINDS). */
function initKind(options, hasMcpServers) {
  const session = options["--session-id"] !== undefined || options["--resume"] !== undefined;
  if (options["--json-schema"] !== undefined) return session ? (options["--resume"] !== undefined ? "session-resume" : "session-start") : "adjudicator";
  return hasMcpServers ? "attempt-mcp" : "attempt-repository";
}

/**
 * The init event: the measured fields of this kind of run, then what this run's argv and
 * environment set (tools, MCP servers, model, permission mode, key source, version, cwd) and the
 * fields that vary per run, as the real CLI fills them in.
 */
function initEvent(kind, own) {
  const measured = INIT_EVENTS?.kinds?.[kind];
  const event = { ...(measured ? structuredClone(measured.fields) : { slash_commands: [], output_style: "default", agents: [], skills: [], plugins: [] }), ...own };
  if (measured?.varying?.includes("messaging_socket_path")) event.messaging_socket_path = `/tmp/cc-socks/${process.pid}.sock`;
  event.uuid = randomUUID();
  return { type: "system", subtype: "init", ...event };
}

// ---------------------------------------------------------------------------------------
// argv, as commander parses the real CLI's options (arity from `claude --help` of 2.1.296)

const ALIASES = {
  "-p": "--print",
  "-v": "--version",
  "-h": "--help",
  "-c": "--continue",
  "-d": "--debug",
  "-r": "--resume",
  "-n": "--name",
  "-w": "--worktree",
  "--bg": "--background",
  "--allowed-tools": "--allowedTools",
  "--disallowed-tools": "--disallowedTools",
};
const FLAGS = new Set([
  "--allow-dangerously-skip-permissions",
  "--ax-screen-reader",
  "--background",
  "--bare",
  "--brief",
  "--chrome",
  "--continue",
  "--dangerously-skip-permissions",
  "--desktop",
  "--disable-slash-commands",
  "--exclude-dynamic-system-prompt-sections",
  "--fork-session",
  "--forward-subagent-text",
  "--help",
  "--ide",
  "--include-hook-events",
  "--include-partial-messages",
  "--no-chrome",
  "--no-session-persistence",
  "--print",
  "--replay-user-messages",
  "--restricted",
  "--safe-mode",
  "--strict-mcp-config",
  "--verbose",
  "--version",
]);
const SINGLE = new Set([
  "--agent",
  "--agents",
  "--append-system-prompt",
  "--autocompact",
  "--debug-file",
  "--effort",
  "--environment",
  "--fallback-model",
  "--input-format",
  "--json-schema",
  "--max-budget-usd",
  "--model",
  "--name",
  "--output-format",
  "--permission-mode",
  "--permission-prompts",
  "--plugin-dir",
  "--plugin-url",
  "--remote-control-session-name-prefix",
  "--session-id",
  "--setting-sources",
  "--settings",
  "--system-prompt",
  "--system-prompt-snapshot",
]);
const VARIADIC = new Set(["--add-dir", "--allowedTools", "--betas", "--disallowedTools", "--file", "--mcp-config", "--tools"]);
const OPTIONAL = new Set(["--cloud", "--debug", "--from-pr", "--prompt-suggestions", "--remote-control", "--resume", "--teleport", "--tmux", "--worktree"]);

class UsageFailure extends Error {}

/** Returns { options: {name: true | string | string[]}, operands: string[] }. */
function parseArgv(argv) {
  const options = {};
  const operands = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--") {
      operands.push(...argv.slice(i + 1));
      break;
    }
    if (!arg.startsWith("-") || arg === "-") {
      operands.push(arg);
      continue;
    }
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const given = eq > 0 ? arg.slice(0, eq) : arg;
    const inline = eq > 0 ? arg.slice(eq + 1) : undefined;
    const name = ALIASES[given] ?? given;
    if (FLAGS.has(name)) {
      options[name] = true;
    } else if (SINGLE.has(name)) {
      // A required option-argument takes the next word whatever it looks like.
      const value = inline ?? argv[++i];
      if (value === undefined) throw new UsageFailure(`error: option '${name}' argument missing`);
      options[name] = value;
    } else if (VARIADIC.has(name)) {
      // Variadic: every following word up to the next one starting with "-" (this is how a
      // prompt placed after --tools becomes a tool name).
      const values = inline !== undefined ? [inline] : [];
      while (i + 1 < argv.length && !argv[i + 1].startsWith("-")) values.push(argv[++i]);
      if (values.length === 0) throw new UsageFailure(`error: option '${name}' argument missing`);
      options[name] = [...(options[name] ?? []), ...values];
    } else if (OPTIONAL.has(name)) {
      if (inline !== undefined) options[name] = inline;
      else if (i + 1 < argv.length && !argv[i + 1].startsWith("-")) options[name] = argv[++i];
      else options[name] = true;
    } else {
      throw new UsageFailure(`error: unknown option '${given}'`);
    }
  }
  return { options, operands };
}

/** Tool names from a comma- or space-separated variadic list. */
function toolList(values) {
  return (values ?? []).flatMap((v) => v.split(/[\s,]+/)).filter(Boolean);
}

// ---------------------------------------------------------------------------------------
// record: what this process was given and can see

function canWrite(dir) {
  const probe = path.join(dir, `.fake-claude-write-probe-${process.pid}-${randomUUID()}`);
  try {
    fs.writeFileSync(probe, "");
    fs.unlinkSync(probe);
    return true;
  } catch {
    return false;
  }
}

function listing(dir) {
  try {
    return { entries: fs.readdirSync(dir).sort() };
  } catch (err) {
    return { error: err.code ?? String(err) };
  }
}

/** Where a session call's files leave the container: src/transport/cli/spec.ts CONTAINER.sessionChannelDir. */
const SESSION_CHANNEL_DIR = "/run/study-runner-session";

/**
 * The agent's side of the session channel (contract R141): what happens when a process of the
 * container user, the CLI's own, tries to write into the channel the session files leave through.
 * Each try records "written" / "connected" or the error code the kernel gave.
 */
async function probeSessionChannel() {
  if (!fs.existsSync(SESSION_CHANNEL_DIR)) return { absent: true };
  const attempt = (f) => {
    try {
      f();
      return "written";
    } catch (err) {
      return err.code ?? String(err);
    }
  };
  const result = { absent: false, entries: listing(SESSION_CHANNEL_DIR) };
  // The socket the wrapper was told to send through (its command line), and whatever the folder holds now.
  let named = [];
  try {
    const argv = fs.readFileSync("/proc/1/cmdline", "utf8").split("\0");
    const i = argv.indexOf("--session-out");
    if (i >= 0 && argv[i + 1]?.startsWith(`${SESSION_CHANNEL_DIR}/`)) named = [path.basename(argv[i + 1])];
  } catch {
    // Unreadable: only the folder's own entries are tried.
  }
  result.socket = named[0] ?? null;
  const names = [...new Set([...named, ...(result.entries.entries ?? [])])];
  // A new file beside the socket, as the Write tool would make it.
  result.newFile = attempt(() => fs.writeFileSync(path.join(SESSION_CHANNEL_DIR, "forged.jsonl"), "{}\n", { flag: "wx" }));
  // Every name in the folder (the socket) opened for writing, as Edit/Write would open it.
  result.openForWrite = Object.fromEntries(names.map((name) => [name, attempt(() => fs.closeSync(fs.openSync(path.join(SESSION_CHANNEL_DIR, name), "r+")))]));
  // A connection of its own to each socket there.
  result.connect = {};
  for (const name of names) {
    result.connect[name] = await new Promise((resolve) => {
      const socket = net.createConnection(path.join(SESSION_CHANNEL_DIR, name));
      const timer = setTimeout(() => (socket.destroy(), resolve("timeout")), 5000);
      socket.on("connect", () => {
        socket.write('{"path":"forged.jsonl","bytes":3}\n{}\n{"end":true}\n');
        clearTimeout(timer);
        socket.destroy();
        resolve("connected");
      });
      socket.on("error", (err) => (clearTimeout(timer), resolve(err.code ?? String(err))));
    });
  }
  // The wrapper's descriptors (it is PID 1): every socket among them opened for writing through /proc.
  let fds;
  try {
    fds = fs.readdirSync("/proc/1/fd");
  } catch (err) {
    result.heldDescriptors = { listing: err.code ?? String(err) };
    return result;
  }
  result.heldDescriptors = {};
  for (const fd of fds) {
    let target;
    try {
      target = fs.readlinkSync(`/proc/1/fd/${fd}`);
    } catch (err) {
      result.heldDescriptors[fd] = `readlink ${err.code ?? String(err)}`;
      continue;
    }
    if (target.startsWith("socket:")) result.heldDescriptors[fd] = attempt(() => fs.closeSync(fs.openSync(`/proc/1/fd/${fd}`, "r+")));
  }
  return result;
}

function writeRecord(label, extraProbePaths, extra = {}) {
  const dir = path.join(FAKE_DIR, "records");
  if (!fs.existsSync(dir)) return;
  const home = process.env.HOME ?? null;
  const cwd = process.cwd();
  const record = {
    argv: process.argv.slice(2),
    envNames: Object.keys(process.env).sort(),
    anthropicApiKeyPresent: "ANTHROPIC_API_KEY" in process.env,
    attempt: process.env.STUDY_RUNNER_ATTEMPT ?? null,
    uid: process.getuid(),
    gid: process.getgid(),
    cwd,
    cwdWritable: canWrite(cwd),
    rootWritable: canWrite("/"),
    home,
    homeWritable: home ? canWrite(home) : false,
    // Every other place a session's agent might write to (its worktree is cwd).
    writable: Object.fromEntries(
      ["/", "/etc", "/usr", "/opt", "/var", "/run", "/run/study-runner-login", "/home/agent/.study-runner/login", "/tmp", "/fake"].map((p) => [p, fs.existsSync(p) ? canWrite(p) : null]),
    ),
    credentialsPresent: home ? fs.existsSync(path.join(home, ".claude", ".credentials.json")) : false,
    // Only the expiry, never a token: enough to tell which login copy the attempt was given.
    credentialsExpiresAt: home ? credentialsExpiresAt(path.join(home, ".claude", ".credentials.json")) : null,
    at: new Date().toISOString(),
    networkInterfaces: Object.keys(os.networkInterfaces()).sort(),
    // Whether `localhost` has a name here: the engine's hosts file, absent for a sandbox without names.
    localhostNamed: hostsNameLocalhost(),
    // What fd 0 is: /dev/null when the runner starts the container without stdin.
    stdinTarget: stdinTarget(),
    listings: Object.fromEntries([...new Set([...PROBE_PATHS, cwd, ...(home ? [home] : []), ...extraProbePaths])].map((p) => [p, listing(p)])),
    ...extra,
  };
  // pid is 1 in every container, so a random suffix keeps two probes from overwriting each other.
  const file = path.join(dir, `${label}-${process.pid}-${randomUUID().slice(0, 8)}.json`);
  fs.writeFileSync(file, `${JSON.stringify(record, null, 2)}\n`);
}

function hostsNameLocalhost() {
  try {
    return /^\s*127\.0\.0\.1\s.*\blocalhost\b/m.test(fs.readFileSync("/etc/hosts", "utf8"));
  } catch {
    return false;
  }
}

function stdinTarget() {
  try {
    return fs.readlinkSync("/proc/self/fd/0");
  } catch (err) {
    return `unreadable: ${err.code ?? String(err)}`;
  }
}

function credentialsExpiresAt(file) {
  try {
    const expiresAt = JSON.parse(fs.readFileSync(file, "utf8"))?.claudeAiOauth?.expiresAt;
    return typeof expiresAt === "number" ? expiresAt : null;
  } catch {
    return null;
  }
}

/** Facts: a refresh spends the single-use refresh token and replaces the file (a new inode). */
function refreshLogin() {
  const file = path.join(process.env.HOME ?? "/nonexistent", ".claude", ".credentials.json");
  const login = JSON.parse(fs.readFileSync(file, "utf8"));
  const oauth = login.claudeAiOauth;
  oauth.accessToken = `refreshed-access-${randomUUID()}`;
  oauth.refreshToken = `refreshed-refresh-${randomUUID()}`;
  oauth.expiresAt = Math.max(oauth.expiresAt ?? 0, Date.now()) + 8 * 3600_000;
  const tmp = `${file}.tmp-${process.pid}-${randomUUID().slice(0, 8)}`;
  fs.writeFileSync(tmp, JSON.stringify(login), { mode: 0o600 });
  fs.renameSync(tmp, file);
}

/**
 * Behaviour `connect: [{ host, port, count?, concurrency?, direct?, send?, holdMs?, timeoutMs? }]`
 * (the strict profile's egress tests): before the transcript, open connections the way an HTTPS client does: through
 * HTTPS_PROXY with CONNECT when it is set (unless `direct`), else straight to host:port; or, with
 * `path` instead of host and port, to that unix socket (an endpoint the runner serves). Each
 * open tunnel sends `send` (default "ping\n"), reads one chunk back and stays open `holdMs`.
 * Writes one line per entry to records/connect-<attempt>-*.jsonl: `via` and how many connections
 * ended how ("tunnel", "refused <status>", "error <code>"), with the first echoed text.
 */
async function attemptConnections(specs, attempt) {
  const proxy = process.env.HTTPS_PROXY ? new URL(process.env.HTTPS_PROXY) : undefined;
  const lines = [];
  for (const spec of specs) {
    const via = proxy && !spec.direct && spec.path === undefined ? "proxy" : "direct";
    const count = spec.count ?? 1;
    const results = {};
    let echo = null;
    let started = 0;
    const worker = async () => {
      while (started < count) {
        started++;
        const r = await connectOnce(spec, via === "proxy" ? proxy : undefined);
        results[r.outcome] = (results[r.outcome] ?? 0) + 1;
        if (r.echo !== undefined && echo === null) echo = r.echo;
      }
    };
    await Promise.all(Array.from({ length: Math.min(spec.concurrency ?? 1, count) }, worker));
    lines.push({ ...(spec.path !== undefined ? { path: spec.path } : { host: spec.host, port: spec.port }), via, count, results, echo });
  }
  const dir = path.join(FAKE_DIR, "records");
  if (fs.existsSync(dir)) {
    fs.writeFileSync(path.join(dir, `connect-${attempt ?? "probe"}-${randomUUID().slice(0, 8)}.jsonl`), lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
  }
}

function connectOnce(spec, proxy) {
  return new Promise((resolve) => {
    let done = false;
    let socket;
    const end = (r) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      setTimeout(
        () => {
          socket?.destroy();
          resolve(r);
        },
        r.outcome === "tunnel" ? (spec.holdMs ?? 0) : 0,
      );
    };
    const timer = setTimeout(() => end({ outcome: "error timeout" }), spec.timeoutMs ?? 10_000);
    const talk = (s) => {
      s.once("data", (d) => end({ outcome: "tunnel", echo: d.toString("utf8") }));
      s.write(spec.send ?? "ping\n");
    };
    const failed = (e) => end({ outcome: `error ${e.code ?? e.message}` });
    if (!proxy) {
      socket = net.connect(spec.path !== undefined ? { path: spec.path } : { host: spec.host, port: spec.port }, () => talk(socket));
      socket.on("error", failed);
      socket.on("close", () => end({ outcome: "error closed" }));
      return;
    }
    const target = `${spec.host.includes(":") ? `[${spec.host}]` : spec.host}:${spec.port}`;
    const req = http.request({ host: proxy.hostname, port: proxy.port, method: "CONNECT", path: target, agent: false });
    req.on("connect", (res, s) => {
      socket = s;
      s.on("error", failed);
      s.on("close", () => end({ outcome: "error closed" }));
      if (res.statusCode !== 200) end({ outcome: `refused ${res.statusCode}` });
      else talk(s);
    });
    req.on("error", failed);
    req.end();
  });
}

// ---------------------------------------------------------------------------------------
// behaviour file

function readBehaviourFile() {
  let text;
  try {
    text = fs.readFileSync(path.join(FAKE_DIR, "behaviour.json"), "utf8");
  } catch (err) {
    if (err.code === "ENOENT") return {};
    throw err;
  }
  return JSON.parse(text);
}

function selectBehaviour(file, attempt) {
  const chosen = (attempt !== undefined ? file.attempts?.[attempt] : undefined) ?? file.default ?? { kind: "ok" };
  return { version: file.version, ...chosen };
}

// ---------------------------------------------------------------------------------------
// output

function emit(event) {
  process.stdout.write(`${typeof event === "string" ? event : JSON.stringify(event)}\n`);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------
// MCP: a minimal stdio JSON-RPC client, enough to act as the CLI towards a real server
// (initialize, notifications/initialized, tools/list, tools/call).

class McpClient {
  constructor(name, config) {
    this.name = name;
    this.nextId = 1;
    this.pending = new Map();
    this.buffer = "";
    this.child = spawn(config.command, config.args ?? [], {
      env: { ...process.env, ...(config.env ?? {}) },
      stdio: ["pipe", "pipe", "ignore"],
    });
    this.closed = new Promise((resolve) => this.child.on("close", resolve));
    this.child.on("error", (err) => this.failAll(err));
    this.child.on("close", () => this.failAll(new Error(`MCP server ${name} exited`)));
    this.child.stdout.setEncoding("utf8");
    this.child.stdout.on("data", (chunk) => this.onData(chunk));
  }

  failAll(err) {
    for (const { reject } of this.pending.values()) reject(err);
    this.pending.clear();
  }

  onData(chunk) {
    this.buffer += chunk;
    let nl;
    while ((nl = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, nl).trim();
      this.buffer = this.buffer.slice(nl + 1);
      if (!line) continue;
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        continue;
      }
      if (msg.id !== undefined && msg.method !== undefined) {
        // A request from the server (e.g. roots/list): this client offers no capabilities.
        this.send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "not supported by fake-claude" } });
      } else if (msg.id !== undefined && this.pending.has(msg.id)) {
        const { resolve, reject } = this.pending.get(msg.id);
        this.pending.delete(msg.id);
        if (msg.error) reject(new Error(msg.error.message ?? JSON.stringify(msg.error)));
        else resolve(msg.result);
      }
    }
  }

  send(msg) {
    this.child.stdin.write(`${JSON.stringify(msg)}\n`);
  }

  request(method, params, timeoutMs = 30_000) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`MCP ${method} timed out`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (v) => (clearTimeout(timer), resolve(v)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
      this.send({ jsonrpc: "2.0", id, method, params });
    });
  }

  async connect(version) {
    await this.request("initialize", {
      protocolVersion: "2025-06-18",
      capabilities: {},
      clientInfo: { name: "fake-claude", version },
    });
    this.send({ jsonrpc: "2.0", method: "notifications/initialized" });
    const listed = await this.request("tools/list", {});
    this.tools = (listed.tools ?? []).map((t) => t.name);
  }

  async close() {
    this.child.stdin.end();
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 2_000);
    await this.closed;
    clearTimeout(timer);
  }
}

/** Measured: the CLI lists MCP tools as mcp__<server>__<tool>, dots replaced by underscores. */
const mcpToolName = (server, tool) => `mcp__${server}__${tool.replace(/\./g, "_")}`;

function readMcpConfigs(values) {
  const servers = {};
  for (const value of values ?? []) {
    const text = value.trim().startsWith("{") ? value : fs.readFileSync(value, "utf8");
    Object.assign(servers, JSON.parse(text).mcpServers ?? {});
  }
  return servers;
}

// ---------------------------------------------------------------------------------------
// the "ok" transcript

/** Regular files under the cwd (relative paths, sorted), as far as they are readable. */
function workspaceFiles(root, limit = 200) {
  const out = [];
  const walk = (dir) => {
    let names;
    try {
      names = fs.readdirSync(dir).sort();
    } catch {
      return;
    }
    for (const name of names) {
      if (out.length >= limit) return;
      const full = path.join(dir, name);
      let st;
      try {
        st = fs.lstatSync(full);
      } catch {
        continue;
      }
      if (st.isDirectory()) walk(full);
      else if (st.isFile()) out.push(full);
    }
  };
  walk(root);
  return out;
}

function readTool(file) {
  const text = fs.readFileSync(file, "utf8");
  return text
    .split("\n")
    .map((line, i) => `${i + 1}\t${line}`)
    .join("\n");
}

function grepTool(files, pattern) {
  const hits = files.filter((f) => {
    try {
      return fs.readFileSync(f, "utf8").includes(pattern);
    } catch {
      return false;
    }
  });
  return hits.length === 0 ? "No files found" : `Found ${hits.length} file${hits.length === 1 ? "" : "s"}\n${hits.join("\n")}`;
}

function priceOf(model, usage) {
  const row = Object.hasOwn(PRICES, model) ? PRICES[model] : undefined;
  if (!row) return { cost: 0, basis: "unknown" };
  const prompt = usage.input + usage.cacheRead + usage.cacheWrite5m + usage.cacheWrite1h;
  const p = row.tier2 && row.tier1MaxPromptTokens !== null && prompt > row.tier1MaxPromptTokens ? row.tier2 : row.tier1;
  const cost = (usage.input * p.input + usage.output * p.output + usage.cacheRead * p.cacheRead + usage.cacheWrite5m * p.cacheWrite5m + usage.cacheWrite1h * p.cacheWrite1h) / 1e6;
  return { cost, basis: "list" };
}

/** Deterministic per-turn usage: turn 0 writes the cache, later turns read it. */
function defaultTurnUsage(i) {
  return { input: 2000 + 150 * i, output: 30 + 5 * i, cacheRead: i === 0 ? 0 : 800, cacheWrite5m: i === 0 ? 800 : 0, cacheWrite1h: 0 };
}

/** Writes into HOME until the file system refuses (ENOSPC), as a CLI whose state outgrows HOME would. */
function fillHome() {
  const fd = fs.openSync(path.join(process.env.HOME ?? "/nonexistent", "fill"), "w");
  const chunk = Buffer.alloc(1 << 20, 0x61);
  let written = 0;
  try {
    for (;;) written += fs.writeSync(fd, chunk);
  } catch (err) {
    if (err.code !== "ENOSPC") throw err;
  } finally {
    fs.closeSync(fd);
  }
  const dir = path.join(FAKE_DIR, "records");
  if (fs.existsSync(dir)) fs.writeFileSync(path.join(dir, `fill-home-${process.env.STUDY_RUNNER_ATTEMPT ?? "probe"}.json`), JSON.stringify({ written }));
}

async function okTranscript(options, b, version, prompt) {
  if (b.refreshLogin) refreshLogin();
  if (b.fillHome) fillHome();
  if (b.connect) await attemptConnections(b.connect, process.env.STUDY_RUNNER_ATTEMPT);
  if (b.malformedFirst) emit("this line is not JSON {");
  const cwd = process.cwd();
  const sessionId = randomUUID();
  const model = options["--model"] ?? DEFAULT_MODEL;
  const denied = new Set(toolList(options["--disallowedTools"]));
  const allowed = toolList(options["--allowedTools"]);
  const requested = toolList(options["--tools"]);
  const builtins = [...new Set(requested)].filter((t) => t !== "default" && !denied.has(t)).sort();

  // MCP servers: live, like the real CLI, which connects to every configured server before
  // its init event. `simulateMcp: true` only pretends (listing the mcp__<server>__ names that
  // --allowedTools grants without connecting), for tests of a transcript the server never saw.
  const servers = readMcpConfigs(options["--mcp-config"]);
  const clients = new Map();
  const mcpServers = [];
  const mcpTools = [];
  for (const [name, config] of Object.entries(servers)) {
    if (b.simulateMcp !== true) {
      const client = (config.type ?? "stdio") === "stdio" && config.command ? new McpClient(name, config) : undefined;
      try {
        if (!client) throw new Error("only stdio servers are scripted");
        await client.connect(version);
        clients.set(name, client);
        mcpServers.push({ name, status: "connected", source: "dynamic" });
        mcpTools.push(...client.tools.map((t) => mcpToolName(name, t)).filter((t) => !denied.has(t)));
      } catch {
        // Measured: a server that fails shows "failed" and its tools are simply absent.
        client?.child.kill("SIGKILL");
        mcpServers.push({ name, status: "failed", source: "dynamic" });
      }
    } else {
      mcpServers.push({ name, status: "connected", source: "dynamic" });
      mcpTools.push(...allowed.filter((t) => t.startsWith(`mcp__${name}__`) && !denied.has(t)));
    }
  }
  // Measured on 2.1.296 (tests/conformance/adjudicator-structured.test.ts): --json-schema adds a
  // StructuredOutput tool, listed in init, whose input is the structured output.
  if (options["--json-schema"] !== undefined) builtins.push("StructuredOutput");
  const tools = [...builtins, ...new Set(mcpTools)];

  emit(
    initEvent(initKind(options, Object.keys(servers).length > 0), {
      cwd,
      session_id: sessionId,
      tools,
      mcp_servers: mcpServers,
      model,
      permissionMode: options["--permission-mode"] ?? "default",
      // Measured: "none" with a login file, the variable's name when a key is in the environment.
      apiKeySource: process.env.ANTHROPIC_API_KEY !== undefined ? "ANTHROPIC_API_KEY" : "none",
      claude_code_version: version,
    }),
  );

  // Plan the tool calls a model offered these tools could make, on real workspace files.
  const files = workspaceFiles(cwd);
  const first = files.find((f) => /readme/i.test(path.basename(f))) ?? files[0];
  const steps = [];
  if (tools.includes("Glob")) steps.push({ name: "Glob", input: { pattern: "**/*" }, run: () => files.join("\n") || "No files found" });
  if (tools.includes("Grep")) steps.push({ name: "Grep", input: { pattern: "the", path: cwd }, run: () => grepTool(files, "the") });
  if (tools.includes("Read") && first) steps.push({ name: "Read", input: { file_path: first }, run: () => readTool(first) });
  for (const call of [b.callTool ?? []].flat()) {
    steps.push({
      name: call.name,
      input: call.input ?? {},
      denied: call.denied === true,
      run: () => `fake-claude: ${call.name} ran`,
    });
  }
  // Without scripted calls, a model offered doc.search would use it once, on the question's longest word.
  const searchName = mcpTools.find((t) => /__doc_search$/.test(t));
  const defaultCalls = searchName ? [{ tool: "doc.search", arguments: { query: longestWord(prompt) } }] : [];
  for (const call of b.mcpCalls ?? (b.simulateMcp ? [] : defaultCalls)) {
    const server = call.server ?? Object.keys(servers)[0] ?? "doc-bridge";
    steps.push({
      name: mcpToolName(server, call.tool),
      input: call.arguments ?? {},
      run: async () => {
        const client = clients.get(server);
        if (!client) return { content: `MCP server ${server} is not connected`, isError: true };
        try {
          const result = await client.request("tools/call", { name: call.tool, arguments: call.arguments ?? {} });
          return { content: result.content ?? [], isError: result.isError === true };
        } catch (err) {
          return { content: `MCP error: ${err.message}`, isError: true };
        }
      },
    });
  }

  const turns = [];
  const permissionDenials = [];
  const assistant = (messageId, usage, block) =>
    emit({
      type: "assistant",
      message: {
        id: messageId,
        type: "message",
        role: "assistant",
        model,
        content: [block],
        stop_reason: null,
        stop_sequence: null,
        usage,
        context_management: null,
      },
      parent_tool_use_id: null,
      session_id: sessionId,
      uuid: randomUUID(),
      timestamp: new Date().toISOString(),
    });
  // Measured: every content block is its own assistant event; blocks of one API message repeat
  // its id and its message_start usage, whose output_tokens is the placeholder 1.
  const startTurn = () => {
    const i = turns.length;
    const u = { ...defaultTurnUsage(i), ...(b.turnUsage?.[i] ?? {}) };
    turns.push(u);
    return {
      id: `msg_fake_${sessionId.slice(0, 8)}_${i + 1}`,
      usage: {
        input_tokens: u.input,
        output_tokens: 1,
        cache_creation_input_tokens: u.cacheWrite5m + u.cacheWrite1h,
        cache_read_input_tokens: u.cacheRead,
        cache_creation: { ephemeral_5m_input_tokens: u.cacheWrite5m, ephemeral_1h_input_tokens: u.cacheWrite1h },
        service_tier: "standard",
      },
    };
  };
  for (const [n, step] of steps.entries()) {
    const turn = startTurn();
    if (n === 0) assistant(turn.id, turn.usage, { type: "text", text: "I'll look at the workspace first." });
    const toolUseId = `toolu_fake_${n + 1}_${randomUUID().slice(0, 8)}`;
    assistant(turn.id, turn.usage, { type: "tool_use", id: toolUseId, name: step.name, input: step.input });
    let content;
    let isError = false;
    if (step.denied) {
      content = `Permission to use ${step.name} has been denied.`;
      isError = true;
      permissionDenials.push({ tool_name: step.name, tool_use_id: toolUseId, tool_input: step.input });
    } else {
      try {
        const r = await step.run();
        if (typeof r === "string") content = r;
        else ({ content, isError } = r);
      } catch (err) {
        content = `Error: ${err.message}`;
        isError = true;
      }
    }
    emit({
      type: "user",
      message: { role: "user", content: [{ tool_use_id: toolUseId, type: "tool_result", content, ...(isError ? { is_error: true } : {}) }] },
      parent_tool_use_id: null,
      session_id: sessionId,
      uuid: randomUUID(),
      timestamp: new Date().toISOString(),
    });
    // Measured: other event types appear between turns.
    if (n === 0) emit({ type: "rate_limit_event", session_id: sessionId, uuid: randomUUID() });
  }
  const subtype = b.subtype ?? "success";
  const structured = options["--json-schema"] !== undefined ? structuredAnswer(options["--json-schema"], b, prompt) : undefined;
  const answer = b.answer ?? (structured !== undefined ? JSON.stringify(structured) : DEFAULT_ANSWER);
  if (b.delayMs) await sleep(b.delayMs);
  if (b.guessDelayMs && structured !== undefined && Object.keys(structured).join() === "armGuess") await sleep(b.guessDelayMs);
  const last = startTurn();
  if (structured !== undefined && b.structuredOutput !== false && b.answer === undefined) {
    // Measured: the model answers by calling StructuredOutput; the CLI acknowledges it and ends
    // the run with no further request, the tool's input as structured_output and as result text.
    const toolUseId = `toolu_fake_structured_${randomUUID().slice(0, 8)}`;
    assistant(last.id, last.usage, { type: "tool_use", id: toolUseId, name: "StructuredOutput", input: structured });
    emit({
      type: "user",
      message: { role: "user", content: [{ tool_use_id: toolUseId, type: "tool_result", content: "Structured output provided successfully" }] },
      parent_tool_use_id: null,
      session_id: sessionId,
      uuid: randomUUID(),
      timestamp: new Date().toISOString(),
    });
  } else {
    assistant(last.id, last.usage, { type: "text", text: answer });
  }
  await Promise.all([...clients.values()].map((c) => c.close()));

  const sum = (key) => turns.reduce((s, t) => s + t[key], 0);
  const totals = { input: sum("input"), output: sum("output"), cacheRead: sum("cacheRead"), cacheWrite5m: sum("cacheWrite5m"), cacheWrite1h: sum("cacheWrite1h") };
  let cost = 0;
  let basis = "list";
  for (const t of turns) {
    const p = priceOf(model, t);
    cost += p.cost;
    basis = p.basis;
  }
  const modelUsage = { [model]: modelUsageEntry(model, totals, cost, basis) };
  if (b.foreignModelUsage) {
    // Measured on 2.1.288: an auxiliary claude-haiku-4-5 entry next to the study model.
    const aux = { input: 350, output: 20, cacheRead: 0, cacheWrite5m: 0, cacheWrite1h: 0 };
    const p = priceOf("claude-haiku-4-5", aux);
    modelUsage["claude-haiku-4-5"] = modelUsageEntry("claude-haiku-4-5", aux, p.cost, p.basis);
    cost += p.cost;
  }
  const result = {
    type: "result",
    subtype,
    is_error: b.isError ?? subtype !== "success",
    duration_ms: 1234,
    duration_api_ms: 1000,
    num_turns: turns.length,
    ...(subtype === "success" || b.answer !== undefined ? { result: answer } : {}),
    ...(structured !== undefined && b.structuredOutput !== false ? { structured_output: structured } : {}),
    stop_reason: "end_turn",
    session_id: sessionId,
    total_cost_usd: cost * (b.reportedCostFactor ?? 1),
    usage: {
      input_tokens: totals.input,
      cache_creation_input_tokens: totals.cacheWrite5m + totals.cacheWrite1h,
      cache_read_input_tokens: totals.cacheRead,
      output_tokens: totals.output,
      server_tool_use: { web_search_requests: 0, web_fetch_requests: 0 },
      service_tier: "standard",
      cache_creation: { ephemeral_1h_input_tokens: totals.cacheWrite1h, ephemeral_5m_input_tokens: totals.cacheWrite5m },
    },
    modelUsage,
    permission_denials: permissionDenials,
    terminal_reason: subtype === "success" ? "completed" : subtype,
    api_error_status: null,
    uuid: randomUUID(),
  };
  emit(result);
  if (b.twoResults) emit({ ...result, uuid: randomUUID() });
  return b.exitCode ?? 0;
}

function modelUsageEntry(model, t, cost, basis) {
  return {
    inputTokens: t.input,
    outputTokens: t.output,
    cacheReadInputTokens: t.cacheRead,
    cacheCreationInputTokens: t.cacheWrite5m + t.cacheWrite1h,
    webSearchRequests: 0,
    costUSD: cost,
    contextWindow: 1000000,
    maxOutputTokens: 128000,
    canonicalModel: model,
    provider: "firstParty",
    costBasis: basis,
  };
}

// ---------------------------------------------------------------------------------------
// main

async function main() {
  const attempt = process.env.STUDY_RUNNER_ATTEMPT;
  let file;
  try {
    file = readBehaviourFile();
    // Tests hand the table in with the behaviour, so they do not depend on which build holds the shared image tag.
    if (file.prices) PRICES = file.prices;
    writeRecord(attempt ?? "probe", [...(file.probePaths ?? [])], { sessionChannel: await probeSessionChannel() });
  } catch (err) {
    // A broken behaviour file is a broken test: fail loudly rather than act "ok".
    process.stderr.write(`fake-claude: cannot use ${FAKE_DIR}: ${err.message}\n`);
    return 70;
  }
  const b = selectBehaviour(file, attempt);
  const version = b.version ?? DEFAULT_VERSION;

  let options;
  let operands;
  try {
    ({ options, operands } = parseArgv(process.argv.slice(2)));
  } catch (err) {
    if (!(err instanceof UsageFailure)) throw err;
    process.stderr.write(`${err.message}\n`);
    return 1;
  }
  if (options["--version"]) {
    emit(`${version} (Claude Code)`);
    return 0;
  }
  if (!options["--print"]) {
    process.stderr.write("fake-claude: only --print is scripted\n");
    return 2;
  }
  if (options["--output-format"] !== "stream-json") {
    process.stderr.write("fake-claude: only --output-format stream-json is scripted\n");
    return 2;
  }
  if (!options["--verbose"]) {
    process.stderr.write("Error: When using --print, --output-format=stream-json requires --verbose\n");
    return 1;
  }
  if (operands.length > 1) {
    process.stderr.write(`error: too many arguments. Expected 1 argument but got ${operands.length}.\n`);
    return 1;
  }
  let prompt = operands[0];
  // Measured: the real CLI reads the prompt from stdin when no operand is given.
  if (prompt === undefined) {
    try {
      prompt = fs.readFileSync(0, "utf8");
    } catch {
      prompt = undefined;
    }
  }
  if (prompt === undefined || prompt.trim() === "") {
    process.stderr.write("Error: Input must be provided either through stdin or as a prompt argument when using --print\n");
    return 1;
  }

  switch (b.kind ?? "ok") {
    case "ok":
      if (options["--json-schema"] !== undefined && (options["--session-id"] !== undefined || options["--resume"] !== undefined)) return sessionTranscript(options, b, version, prompt);
      return okTranscript(options, b, version, prompt);
    case "events":
    case "exit":
      if (b.malformedFirst) emit("this line is not JSON {");
      for (const event of b.events ?? []) emit(event);
      return b.kind === "exit" ? (b.code ?? 1) : (b.exitCode ?? 0);
    case "sleep":
      for (const event of b.events ?? []) emit(event);
      await sleep((b.seconds ?? 3600) * 1000);
      return b.exitCode ?? 0;
    case "flood": {
      for (const event of b.events ?? []) emit(event);
      const line = `${JSON.stringify({ type: "assistant", message: { id: "msg_flood", type: "message", role: "assistant", model: options["--model"] ?? DEFAULT_MODEL, content: [{ type: "text", text: "x".repeat(900) }] } })}\n`;
      for (let written = 0; b.bytes === undefined || written < b.bytes; written += line.length) {
        if (!process.stdout.write(line)) await new Promise((resolve) => process.stdout.once("drain", resolve));
      }
      return b.exitCode ?? 0;
    }
    case "oom": {
      for (const event of b.events ?? []) emit(event);
      // stdout is a pipe (asynchronous): let the events leave before the kill can come.
      await new Promise((resolve) => process.stdout.write("", resolve));
      const held = [];
      // Filled, not just reserved, so the pages are really charged to the container's cgroup.
      for (let mb = 0; mb < (b.maxMb ?? 1024); mb += 8) held.push(Buffer.alloc(8 << 20, 1));
      process.stderr.write(`fake-claude: ${held.length * 8} MiB allocated and not killed\n`);
      return b.exitCode ?? 0;
    }
    case "garbage":
      for (let i = 0; i < (b.lines ?? 3); i++) emit(`garbage ${i} <<<\u0000>>> {"type":`);
      return b.exitCode ?? 0;
    default:
      process.stderr.write(`fake-claude: unknown behaviour kind ${JSON.stringify(b.kind)}\n`);
      return 70;
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`fake-claude: ${err.stack ?? err}\n`);
    process.exitCode = 70;
  },
);

function longestWord(text) {
  return (
    String(text)
      .split(/[^A-Za-z]+/)
      .reduce((a, w) => (w.length > a.length ? w : a), "") || "docs"
  );
}

/** The item id of an adjudicator's prompt: its "Item: <id>" line. */
function promptItemId(prompt) {
  return /^Item: (\S+)$/m.exec(String(prompt))?.[1];
}

/** The adjudicator's scripted verdict (see the header), consistent with the prompt's propositions. */
function structuredVerdict(b, prompt) {
  // The runner's prompt puts every text it embeds on a line of its own as a JSON string literal, so a
  // line that starts with "Item: " or "Pn: \"" is the prompt's own, wherever it stands.
  const itemId = promptItemId(prompt);
  const ids = [...String(prompt).matchAll(/^(P[1-9][0-9]*): "/gm)].map((m) => m[1]);
  const given = (itemId !== undefined ? b.verdicts?.[itemId] : undefined) ?? b.verdict ?? {};
  const outcome = given.outcome ?? "correct";
  const verdictOf = (i) => (outcome === "correct" || (outcome === "partial" && i === 0) ? "supported" : "missing");
  return {
    outcome,
    propositions: ids.map((id, i) => ({ id, verdict: verdictOf(i), citation: verdictOf(i) === "supported" ? "valid" : "invalid", reason: `fake-claude: scripted ${outcome}` })),
    contradictions: outcome === "incorrect" ? ["fake-claude: a scripted contradiction"] : [],
    reasons: `fake-claude: scripted ${outcome} verdict for ${itemId ?? "an item without an id"}`,
    ...given,
  };
}

/** What the `--json-schema` asks for: the arm-guess call's { armGuess } (its only property), else a verdict. */
function structuredAnswer(schemaText, b, prompt) {
  let properties = [];
  try {
    properties = Object.keys(JSON.parse(schemaText)?.properties ?? {});
  } catch {
    // Not JSON: answered as a verdict, which the runner then finds unusable.
  }
  if (properties.length !== 1 || properties[0] !== "armGuess") return structuredVerdict(b, prompt);
  const itemId = promptItemId(prompt);
  // A naive reader that takes any masked word for a trace of the documentation server. With
  // symmetric masking that tells nothing.
  const answer = /^<<<ANSWER\n(.*)\nANSWER>>>$/m.exec(String(prompt))?.[1] ?? "";
  const naive = /\[masked\]/.test(answer) ? "files-and-docs-server" : "files-only";
  return { armGuess: (itemId !== undefined ? b.guesses?.[itemId] : undefined) ?? naive };
}

// ---------------------------------------------------------------------------------------
// session tasks

/**
 * One Messages API request as the real CLI sends it for a session call (`session.viaApi`): to
 * $ANTHROPIC_BASE_URL (the runner's relay to its gateway), with the login's token from
 * $HOME/.claude/.credentials.json as `Authorization: Bearer`, only headers and body members the
 * pinned CLI was measured to send, not streamed. Returns the reply's message id and usage.
 */
async function askModelApi(model, prompt) {
  const base = process.env.ANTHROPIC_BASE_URL;
  if (!base) return { ok: false, problem: "no ANTHROPIC_BASE_URL" };
  let token;
  try {
    token = JSON.parse(fs.readFileSync(path.join(process.env.HOME ?? "/nonexistent", ".claude", ".credentials.json"), "utf8")).claudeAiOauth.accessToken;
  } catch (err) {
    return { ok: false, problem: `no login: ${err.code ?? err.message}` };
  }
  // The real CLI's requests carry its system prompt and tools (tens of KiB); a few KiB of padding stand in for them, so the
  // reply's prompt tokens are ones a request of this size can produce (the gateway checks that).
  const text = `${String(prompt).slice(0, 16_000)}\n${"-".repeat(8192)}`;
  const body = JSON.stringify({ model, max_tokens: 1024, messages: [{ role: "user", content: [{ type: "text", text }] }], stream: false });
  const url = new URL("/v1/messages?beta=true", base);
  return new Promise((resolve) => {
    const req = http.request(
      url,
      { method: "POST", headers: { authorization: `Bearer ${token}`, "anthropic-version": "2023-06-01", "content-type": "application/json", "content-length": Buffer.byteLength(body) }, agent: false },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          if (res.statusCode !== 200) return resolve({ ok: false, problem: `${res.statusCode} ${text.slice(0, 300)}` });
          try {
            const m = JSON.parse(text);
            const u = m.usage;
            resolve({
              ok: true,
              id: m.id,
              usage: { input: u.input_tokens, output: u.output_tokens, cacheRead: u.cache_read_input_tokens ?? 0, cacheWrite5m: u.cache_creation_input_tokens ?? 0, cacheWrite1h: 0 },
            });
          } catch (err) {
            resolve({ ok: false, problem: `unreadable reply: ${err.message}` });
          }
        });
      },
    );
    req.on("error", (err) => resolve({ ok: false, problem: err.code ?? err.message }));
    req.end(body);
  });
}

/** Where the real CLI keeps a session: ~/.claude/projects/<cwd with "/" as "-">/<id>.jsonl (measured). */
function sessionFile(id) {
  return path.join(process.env.HOME ?? "/nonexistent", ".claude", "projects", process.cwd().replace(/[^A-Za-z0-9]/g, "-"), `${id}.jsonl`);
}

/**
 * One call of a session: ask `questions` times (one question a call), then apply `edits` in the
 * working folder and say done. The session file carries the calls so far and the cumulative
 * cost, so a resume without it fails as the real one does (no request, exit 1, no result), and
 * total_cost_usd is cumulative over the session like the real CLI's.
 */
async function sessionTranscript(options, b, version, prompt) {
  const s = b.session ?? {};
  const resume = options["--resume"] !== undefined;
  const id = resume ? options["--resume"] : options["--session-id"];
  const file = sessionFile(id);
  let history = [];
  if (resume) {
    try {
      history = fs
        .readFileSync(file, "utf8")
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l));
    } catch {
      history = undefined;
    }
    if (history === undefined || s.failResume) {
      process.stderr.write(`No conversation found with session ID: ${id}\n`);
      return 1;
    }
  }
  const call = history.length;
  const model = options["--model"] ?? DEFAULT_MODEL;
  const denied = new Set(toolList(options["--disallowedTools"]));
  const tools = [...new Set([...toolList(options["--tools"]).filter((t) => !denied.has(t)), "StructuredOutput"])].sort();
  const reported = s.sessionId ?? id;
  const stamp = () => ({ parent_tool_use_id: null, session_id: reported, uuid: randomUUID(), timestamp: new Date().toISOString() });
  emit(
    initEvent(initKind(options, false), {
      cwd: process.cwd(),
      session_id: reported,
      tools,
      mcp_servers: [],
      model,
      permissionMode: options["--permission-mode"] ?? "default",
      apiKeySource: "none",
      claude_code_version: version,
    }),
  );

  const asks = call < (s.questions ?? 1);
  const blocks = [];
  if (s.delayMs) await sleep(s.delayMs);
  // An edit with `call` happens in that call; without, in the call that says done.
  for (const e of (s.edits ?? []).filter((e) => (e.call === undefined ? !asks : e.call === call))) {
    const target = path.join(process.cwd(), e.path);
    if (e.append !== undefined) fs.appendFileSync(target, e.append);
    else fs.writeFileSync(target, e.content ?? "");
    blocks.push({ name: "Write", input: { file_path: target } });
  }
  const structured = asks
    ? { status: "question", question: s.question ?? `fake-claude: question ${call + 1} about the task`, summary: `fake-claude: nothing changed yet (call ${call + 1})` }
    : { status: "done", summary: `fake-claude: ${blocks.length} file(s) changed after ${call} answer(s)` };
  blocks.push({ name: "StructuredOutput", input: structured });

  let cost = 0;
  const totals = { input: 0, output: 0, cacheRead: 0, cacheWrite5m: 0, cacheWrite1h: 0 };
  // `viaApi`: one real request through ANTHROPIC_BASE_URL (the runner's gateway), whose reply's id and usage the call reports.
  const reply = s.viaApi ? await askModelApi(model, prompt) : null;
  if (reply && !reply.ok) {
    process.stderr.write(`fake-claude: API Error: ${reply.problem}\n`);
    return 1;
  }
  for (const [i, block] of blocks.entries()) {
    const u = reply ? reply.usage : { ...defaultTurnUsage(i), ...(s.turnUsage?.[call] ?? {}) };
    // A reply's usage is its one message's: counted once, repeated on each of its blocks' events.
    if (!reply || i === 0) {
      for (const k of Object.keys(totals)) totals[k] += u[k];
      cost += priceOf(model, u).cost;
    }
    const toolUseId = `toolu_fake_s${call}_${i}`;
    const usage = { input_tokens: u.input, output_tokens: reply ? u.output : 1, cache_creation_input_tokens: u.cacheWrite5m + u.cacheWrite1h, cache_read_input_tokens: u.cacheRead };
    // With a reply, every block is part of its one message (one id), as the real CLI streams a message's blocks.
    const messageId = reply ? reply.id : `msg_fake_s${call}_${i}`;
    emit({
      type: "assistant",
      message: { id: messageId, type: "message", role: "assistant", model, content: [{ type: "tool_use", id: toolUseId, ...block }], stop_reason: null, usage },
      ...stamp(),
    });
    emit({
      type: "user",
      message: {
        role: "user",
        content: [{ tool_use_id: toolUseId, type: "tool_result", content: block.name === "StructuredOutput" ? "Structured output provided successfully" : "The file has been updated." }],
      },
      ...stamp(),
    });
  }
  // The session's previous calls' usage and cost, as the real CLI reports them after a resume.
  const before = history.at(-1) ?? { cost: 0, totals: { input: 0, output: 0, cacheRead: 0, cacheWrite5m: 0, cacheWrite1h: 0 } };
  const all = Object.fromEntries(Object.keys(totals).map((k) => [k, totals[k] + before.totals[k]]));
  // `reportedCostFactor`: a CLI whose total_cost_usd is not what its requests cost (the gateway's metered spend).
  const cumulative = before.cost + cost * (s.reportedCostFactor ?? 1);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.appendFileSync(file, `${JSON.stringify({ call, cost: cumulative, totals: all, prompt: String(prompt).slice(0, 200) })}\n`);
  emit({
    type: "result",
    subtype: "success",
    is_error: false,
    duration_ms: 1000 + call,
    duration_api_ms: 900,
    num_turns: blocks.length + 1,
    result: JSON.stringify(structured),
    structured_output: structured,
    stop_reason: "tool_use",
    // `resultSessionId`: null leaves session_id out of the result, a string reports that id in it alone.
    ...(s.resultSessionId === null ? {} : { session_id: s.resultSessionId ?? reported }),
    total_cost_usd: cumulative,
    usage: { input_tokens: all.input, cache_creation_input_tokens: all.cacheWrite5m + all.cacheWrite1h, cache_read_input_tokens: all.cacheRead, output_tokens: all.output },
    modelUsage: { [model]: modelUsageEntry(model, all, cumulative, priceOf(model, all).basis) },
    permission_denials: [],
    terminal_reason: "completed",
    api_error_status: null,
    uuid: randomUUID(),
  });
  return 0;
}
