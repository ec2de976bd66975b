// with-relay.cjs [--login <dir>] [--api <socket>] [--proxy <socket>] -- <command> [args...]
// with-relay.cjs <socket> -- <command> [args...]            (the same as --api <socket>)
//
// The container's entrypoint when something on the host is reached through a unix socket
// bind-mounted into a container whose network is "none". It starts one relay (api-relay.cjs) per
// socket in this process, each listening on 127.0.0.1, and only once all of them listen spawns
// <command> (claude) with the same environment and every stdio stream inherited, so the
// container's stdout is exactly the CLI's stream-json (this wrapper never writes to stdout).
// Signals it receives go to the child, and it exits with the child's exit code (128 + signal
// number when the child was killed: as PID 1 of a container this process cannot re-raise a signal
// on itself).
//
//   --api <socket>    the Messages API; the port is read from ANTHROPIC_BASE_URL, which must be
//                     http://127.0.0.1:<port>.
//   --proxy <socket>  the runner's egress proxy (isolation "strict"); the port is read from
//                     HTTPS_PROXY, which must be http://127.0.0.1:<port>, and HTTP_PROXY must
//                     name the same URL.
//   --login <dir>     the staged login: <dir>/.claude/.credentials.json (and <dir>/.claude.json
//                     when present) are copied into $HOME, a size-bounded tmpfs, before the
//                     command starts. A refresh of $HOME/.claude/.credentials.json is copied back
//                     to <dir> as soon as it happens and once more when the command exits: only a
//                     regular file (lstat, never through a symlink) of at most 64 KiB. When the
//                     command exits with $HOME full, a line on stderr says so (the runner reads it).
//                     A TMPDIR under $HOME (a session container has no writable /tmp) is created.
//   --stdin <file>    the command's stdin is this file (a session task's prompt), not the closed
//                     stdin of the container: the prompt never becomes an argument.
//   --projects <dir>  a session's state (needs --login and --session-out): regular files under
//                     <dir> are copied into $HOME/.claude/projects before the command starts: never
//                     through a symlink (lstat, O_NOFOLLOW), at most 8 MiB a file and 32 MiB in all,
//                     names of letters, digits, '.', '_' and '-' only, at most 4 levels deep.
//   --session-out <socket>  the channel the session files leave through: a unix socket the runner
//                     listens on, in a folder mounted read-only. This process connects to it before
//                     the command starts and waits for the runner's "ready" line, which the runner
//                     sends only after it has closed its listener: from then on nobody else can
//                     connect, and the connection is a descriptor of this process alone (close-on-
//                     exec, so the command does not inherit it; a socket cannot be opened through
//                     /proc/<pid>/fd, ENXIO). When the command exits, every regular file under
//                     $HOME/.claude/projects (the same bounds as --projects) is written to it as
//                     frames: a JSON line {"path","bytes"} and the bytes, then {"end":true}. So the
//                     agent's file tools have no path to write into what leaves, whatever its
//                     permission rules say: the kernel refuses (EROFS for the folder, ENXIO for the
//                     socket, ECONNREFUSED/ENOENT for a second connection).
//
// Why one wrapper process rather than a shell line or a second container: a scratch image has no
// shell, and a sidecar would need a shared network namespace; here the relays live exactly as long
// as the CLI and cannot be started late (the CLI's first request comes at once).
//
// The ports are read from the variables the CLI itself uses, so the address the CLI uses and the
// one a relay listens on cannot disagree; anything else is refused before the CLI starts (exit 2),
// never silently routed elsewhere.
//
// CommonJS, and the relay module loaded only when a relay is asked for: this process starts before
// every CLI, and an ES module entry costs every attempt the ES loader's start (measured: about
// 6 ms of an attempt container's life; docs/performance.md).
"use strict";
const { spawn } = require("node:child_process");
const fs = require("node:fs");
const { constants } = require("node:os");
const path = require("node:path");

const USAGE =
  "usage: with-relay.cjs [--login <dir>] [--api <unix-socket-path>] [--proxy <unix-socket-path>] [--stdin <file>] [--projects <dir> --session-out <unix-socket-path>] -- <command> [args...]";
/** Bounds of a session's state copied out of the container (src/session/ keeps them). */
const PROJECT_FILE_LIMIT_BYTES = 8 * 1024 * 1024;
const PROJECTS_LIMIT_BYTES = 32 * 1024 * 1024;
const PROJECTS_MAX_DEPTH = 4;
const PROJECT_NAME_RE = /^[A-Za-z0-9_.-]{1,200}$/;
/** The largest login copied back: a real .credentials.json is well under 4 KiB. */
const LOGIN_LIMIT_BYTES = 64 * 1024;
/** Written to stderr when HOME is full at the end; src/sandbox/bounded.ts looks for it. */
const HOME_FULL_MARK = "with-relay: HOME is full";

function fail(code, message) {
  process.stderr.write(`with-relay: ${message}\n`);
  process.exit(code);
}

/** The port of an http://127.0.0.1:<port> URL in variable `name`, or exit 2. */
function loopbackPort(name) {
  const value = process.env[name] ?? "";
  const port = /^http:\/\/127\.0\.0\.1:([0-9]{1,5})\/?$/.exec(value)?.[1];
  if (port === undefined) fail(2, `${name} ${JSON.stringify(value)} is not http://127.0.0.1:<port>`);
  return port;
}

const args = process.argv.slice(2);
const dash = args.indexOf("--");
if (dash < 0 || dash === args.length - 1) fail(2, USAGE);
const options = args.slice(0, dash);
const [command, ...commandArgs] = args.slice(dash + 1);

const sockets = {};
if (options.length === 1 && !options[0].startsWith("--")) {
  sockets.api = options[0];
} else {
  for (let i = 0; i < options.length; i += 2) {
    const kind = { "--api": "api", "--proxy": "proxy", "--login": "login", "--stdin": "stdin", "--projects": "projects", "--session-out": "sessionOut" }[options[i]];
    if (kind === undefined || options[i + 1] === undefined || sockets[kind] !== undefined) fail(2, USAGE);
    sockets[kind] = options[i + 1];
  }
}
if (Object.keys(sockets).length === 0) fail(2, USAGE);
const loginDir = sockets.login;
const stdinFile = sockets.stdin;
const projectsDir = sockets.projects;
const sessionOut = sockets.sessionOut;
delete sockets.sessionOut;
delete sockets.login;
delete sockets.stdin;
delete sockets.projects;
if (projectsDir !== undefined && loginDir === undefined) fail(2, "--projects needs --login");
if ((projectsDir === undefined) !== (sessionOut === undefined)) fail(2, "--projects and --session-out go together: the session files come in through one and leave through the other");

const relays = [];
if (sockets.api !== undefined) relays.push({ port: loopbackPort("ANTHROPIC_BASE_URL"), socket: sockets.api });
if (sockets.proxy !== undefined) {
  const port = loopbackPort("HTTPS_PROXY");
  // A plain-http request must not bypass the proxy's accounting through some other route.
  if (process.env.HTTP_PROXY !== process.env.HTTPS_PROXY) fail(2, `HTTP_PROXY ${JSON.stringify(process.env.HTTP_PROXY ?? "")} differs from HTTPS_PROXY`);
  relays.push({ port, socket: sockets.proxy });
}
if (relays.length === 2 && relays[0].port === relays[1].port) fail(2, `ANTHROPIC_BASE_URL and HTTPS_PROXY name the same port ${relays[0].port}`);
/** Starts every relay, each listening before the command starts; the relay module is loaded only for them. */
async function startRelays() {
  if (relays.length === 0) return;
  const { relayArgumentProblem, startApiRelay } = require("./api-relay.cjs");
  for (const r of relays) {
    const problem = relayArgumentProblem(r.port, r.socket);
    if (problem) fail(2, problem);
  }
  for (const r of relays) {
    try {
      await startApiRelay(Number(r.port), r.socket);
    } catch (err) {
      fail(1, `cannot listen on 127.0.0.1:${r.port}: ${err.code ?? ""} ${err.message}`);
    }
  }
}

const home = process.env.HOME ?? "";
const homeCredentials = path.join(home, ".claude", ".credentials.json");
let copiedOut;

function stageLoginIn() {
  if (!path.isAbsolute(home)) fail(2, `HOME ${JSON.stringify(home)} is not an absolute path`);
  fs.mkdirSync(path.join(home, ".claude"), { recursive: true, mode: 0o700 });
  // A session container has no writable /tmp: its TMPDIR is a folder of HOME, made here.
  const tmp = process.env.TMPDIR ?? "";
  if (tmp.startsWith(`${home}/`)) fs.mkdirSync(tmp, { recursive: true, mode: 0o700 });
  const credentials = fs.readFileSync(path.join(loginDir, ".claude", ".credentials.json"));
  fs.writeFileSync(homeCredentials, credentials, { mode: 0o600, flag: "wx" });
  copiedOut = credentials;
  try {
    fs.writeFileSync(path.join(home, ".claude.json"), fs.readFileSync(path.join(loginDir, ".claude.json")), { mode: 0o600, flag: "wx" });
  } catch (err) {
    if (err.code !== "ENOENT") throw err;
  }
}

/** Copies a refreshed login back to the staged folder: a bounded regular file, never a link's target. */
function copyLoginOut() {
  let bytes;
  try {
    const st = fs.lstatSync(homeCredentials);
    if (!st.isFile() || st.size > LOGIN_LIMIT_BYTES) {
      process.stderr.write(`with-relay: $HOME/.claude/.credentials.json is not a regular file of at most ${LOGIN_LIMIT_BYTES} bytes; not copied back\n`);
      return;
    }
    bytes = readRegularFile(homeCredentials);
  } catch {
    return; // mid-rename or removed: the next event or the exit copies it
  }
  if (bytes === undefined || bytes.length > LOGIN_LIMIT_BYTES || (copiedOut !== undefined && bytes.equals(copiedOut))) return;
  const target = path.join(loginDir, ".claude", ".credentials.json");
  const temp = `${target}.with-relay-${process.pid}`;
  try {
    writePrivateFile(temp, bytes);
    fs.renameSync(temp, target);
    copiedOut = bytes;
  } catch (err) {
    process.stderr.write(`with-relay: the refreshed login could not be copied back (${err.code ?? "error"})\n`);
  }
}

/**
 * Copies the regular files of one tree into another: never a symlink, a special file or a name
 * outside PROJECT_NAME_RE, within the size bounds (lstat, then O_NOFOLLOW): the staged session
 * files coming in. Those going out are read the same way by sessionFrames.
 */
function copyTree(from, to, budget, depth = 0) {
  let names;
  try {
    names = fs.readdirSync(from);
  } catch (err) {
    if (err.code === "ENOENT") return;
    throw err;
  }
  fs.mkdirSync(to, { recursive: true, mode: 0o700 });
  for (const name of names.sort()) {
    if (!PROJECT_NAME_RE.test(name) || name === "." || name === "..") {
      process.stderr.write(`with-relay: session file name ${JSON.stringify(name.slice(0, 80))} is not copied\n`);
      continue;
    }
    const source = path.join(from, name);
    const st = fs.lstatSync(source);
    if (st.isDirectory()) {
      if (depth + 1 >= PROJECTS_MAX_DEPTH) continue;
      copyTree(source, path.join(to, name), budget, depth + 1);
      continue;
    }
    if (!st.isFile() || st.size > PROJECT_FILE_LIMIT_BYTES || budget.left < st.size) {
      process.stderr.write(`with-relay: session file ${name} is not a regular file within the bounds; not copied\n`);
      continue;
    }
    const bytes = readRegularFile(source);
    if (bytes === undefined || bytes.length > PROJECT_FILE_LIMIT_BYTES || budget.left < bytes.length) continue;
    budget.left -= bytes.length;
    writePrivateFile(path.join(to, name), bytes);
  }
}

/** A file's bytes read through no symlink, or undefined when it is not a regular file (a FIFO does not block the open). */
function readRegularFile(file) {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  try {
    return fs.fstatSync(fd).isFile() ? fs.readFileSync(fd) : undefined;
  } finally {
    fs.closeSync(fd);
  }
}

/** Writes `bytes` to `file` (mode 600, never through a symlink) and syncs it to disk. */
function writePrivateFile(file, bytes) {
  const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_NOFOLLOW, 0o600);
  try {
    fs.writeSync(fd, bytes);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Opens the session channel before the command starts: connects, then waits for the runner's
 * "ready" line (sent once its listener is closed). Resolves with the connected socket.
 */
function openSessionChannel() {
  const net = require("node:net");
  return new Promise((resolve, reject) => {
    const socket = net.createConnection(sessionOut);
    let seen = "";
    const timer = setTimeout(() => (socket.destroy(), reject(new Error("no ready line within 30 s"))), 30_000);
    socket.on("error", (err) => (clearTimeout(timer), reject(err)));
    socket.on("data", function onData(chunk) {
      seen += chunk.toString("latin1");
      if (seen.length > 64) return socket.destroy(new Error("the runner's greeting is not a ready line"));
      if (!seen.includes("\n")) return;
      clearTimeout(timer);
      socket.off("data", onData);
      socket.removeAllListeners("error");
      // The runner may go away while the command runs; sendSessionFiles reports it then.
      socket.on("error", () => {});
      if (seen !== "ready\n") return reject(new Error("the runner's greeting is not a ready line"));
      resolve(socket);
    });
  });
}

/** The session files under $HOME/.claude/projects as frames, within the bounds copyTree keeps. */
function sessionFrames() {
  const frames = [];
  const budget = { left: PROJECTS_LIMIT_BYTES };
  const walk = (from, rel, depth) => {
    let names;
    try {
      names = fs.readdirSync(from);
    } catch (err) {
      if (err.code === "ENOENT") return;
      throw err;
    }
    for (const name of names.sort()) {
      if (!PROJECT_NAME_RE.test(name) || name === "." || name === "..") {
        process.stderr.write(`with-relay: session file name ${JSON.stringify(name.slice(0, 80))} is not copied\n`);
        continue;
      }
      const source = path.join(from, name);
      const st = fs.lstatSync(source);
      if (st.isDirectory()) {
        if (depth + 1 < PROJECTS_MAX_DEPTH) walk(source, [...rel, name], depth + 1);
        continue;
      }
      if (!st.isFile() || st.size > PROJECT_FILE_LIMIT_BYTES || budget.left < st.size) {
        process.stderr.write(`with-relay: session file ${name} is not a regular file within the bounds; not copied\n`);
        continue;
      }
      const bytes = readRegularFile(source);
      if (bytes === undefined || bytes.length > PROJECT_FILE_LIMIT_BYTES || budget.left < bytes.length) continue;
      budget.left -= bytes.length;
      frames.push(Buffer.from(`${JSON.stringify({ path: [...rel, name].join("/"), bytes: bytes.length })}\n`), bytes);
    }
  };
  walk(path.join(home, ".claude", "projects"), [], 0);
  frames.push(Buffer.from('{"end":true}\n'));
  return frames;
}

/** Writes the session files to the channel and resolves once the runner has closed it (or after 30 s). */
function sendSessionFiles(channel) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => (channel.destroy(), resolve()), 30_000);
    channel.on("error", (err) => process.stderr.write(`with-relay: the session files could not be sent (${err.code ?? "error"})\n`));
    channel.on("close", () => (clearTimeout(timer), resolve()));
    channel.resume();
    try {
      for (const frame of sessionFrames()) channel.write(frame);
    } catch (err) {
      // No end frame: the runner keeps the session's previous state.
      process.stderr.write(`with-relay: the session files could not be read (${err.code ?? "error"})\n`);
      channel.destroy();
      return;
    }
    channel.end();
  });
}

function reportFullHome() {
  try {
    const s = fs.statfsSync(home);
    // A tmpfs reports no reserved blocks: "full" is less than one 64 KiB write left.
    if (s.bavail * s.bsize < 64 * 1024) process.stderr.write(`${HOME_FULL_MARK} (${s.blocks * s.bsize} bytes): the CLI ran out of space in its HOME\n`);
  } catch {
    // statfs of a tmpfs does not fail in practice; a failure here changes nothing about the exit.
  }
}

startRelays().then(main, (err) => fail(1, `cannot start the relays: ${err.message}`));

/** Stages the login and the session files, then runs the command and exits with its code. */
async function main() {
  let channel;
  if (loginDir !== undefined) {
    try {
      stageLoginIn();
    } catch (err) {
      fail(2, `cannot copy the login from ${loginDir} into HOME: ${err.code ?? err.message}`);
    }
    if (projectsDir !== undefined) {
      try {
        copyTree(projectsDir, path.join(home, ".claude", "projects"), { left: PROJECTS_LIMIT_BYTES });
      } catch (err) {
        fail(2, `cannot copy the session files from ${projectsDir} into HOME: ${err.code ?? err.message}`);
      }
    }
    if (sessionOut !== undefined) {
      try {
        channel = await openSessionChannel();
      } catch (err) {
        fail(2, `cannot open the session channel ${sessionOut}: ${err.code ?? err.message}`);
      }
    }
    try {
      // inotify works on a tmpfs: the refresh leaves the container even if the container is killed right after.
      fs.watch(path.dirname(homeCredentials), { persistent: false }, (_event, name) => {
        if (name === null || name === ".credentials.json") copyLoginOut();
      });
    } catch {
      // Without a watch the copy at exit still happens.
    }
  }

  let stdin = "inherit";
  if (stdinFile !== undefined) {
    try {
      stdin = fs.openSync(stdinFile, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    } catch (err) {
      fail(2, `cannot open ${stdinFile} as the command's stdin: ${err.code ?? err.message}`);
    }
  }
  const child = spawn(command, commandArgs, { stdio: [stdin, "inherit", "inherit"] });
  const forwarded = ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"];
  for (const signal of forwarded) process.on(signal, () => child.kill(signal));
  child.on("error", (err) => fail(err.code === "ENOENT" ? 127 : 126, `cannot start ${command}: ${err.message}`));
  child.on("exit", async (code, signal) => {
    if (loginDir !== undefined) {
      copyLoginOut();
      if (channel !== undefined) await sendSessionFiles(channel);
      reportFullHome();
    }
    process.exit(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0));
  });
}
