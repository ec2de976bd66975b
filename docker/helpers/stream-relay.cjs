// stream-relay.cjs [<name>=<socket> ...]: the engine-api channel's relay (src/sandbox/engine-api.ts).
//
// Runs alone in a per-attempt container with network "none", its stdio attached by the runner
// through the engine's API; it may be started before its attempt is known (made ahead), so with
// no arguments it waits for the runner's `listen` frame, which names the sockets. It listens on
// each unix <socket> (in a per-attempt volume the attempt
// container mounts read-only where it mounts the runner's socket folders on a local engine), and
// carries every connection accepted there as one channel of a multiplexed stream on its stdout,
// the runner's side answering on its stdin. The runner joins each channel to the real endpoint
// (the model gateway, the doc-bridge, the egress proxy), which sees the same bytes as through a
// bound socket folder.
//
// A frame: channel (uint32 BE) | kind (uint8) | length (uint32 BE) | payload (at most 64 KiB).
//   kind 1 open   (relay -> runner) payload: the endpoint's name; channel ids grow from 1
//   kind 2 data   (both ways)
//   kind 3 close  (both ways) the sender sends no more on the channel (a half-close, as a FIN)
//   kind 4 ready  (relay -> runner, channel 0) every socket listens
//   kind 5 listen (runner -> relay, channel 0, once) payload: <name>=<socket> lines
//   kind 6 put    (runner -> relay, channel 0, before listen) payload: a staged entry's JSON header
//                 {"root","path","type","mode","uid","gid","size"}; a file's bytes follow as kind 2
//                 data frames on channel 0
//   kind 7 staged (relay -> runner, channel 0, before ready) payload: the digest of what it wrote
// The runner refuses anything else (src/sandbox/stream-mux.ts keeps the same numbers).
//
// The content it writes (the staged folder, test files; src/sandbox/staged-stream.ts): each entry
// written under its root (where a volume is mounted), a folder
// before what it holds, never over anything there (exclusive creates, no link followed), with the
// entry's mode and owner (the container keeps CAP_CHOWN for that alone); each file read back once
// whole, the folders' modes and owners set last, deepest first, and the digest of what is on disk
// sent before `ready`. A header that breaks the format or the bounds ends the relay.
//
// Bounded: a connection whose bytes the runner has not taken (stdout full) pauses every
// connection; a connection that does not read what the runner sent pauses stdin.
"use strict";
const fs = require("node:fs");
const net = require("node:net");

const crypto = require("node:crypto");
const posix = require("node:path").posix;

const KIND = { open: 1, data: 2, close: 3, ready: 4, listen: 5, put: 6, staged: 7 };
const HEADER = 9;
const MAX_PAYLOAD = 64 * 1024;
const CONNECTION_BUFFER = 1024 * 1024;
// The staged folder's bounds (src/sandbox/staged-stream.ts keeps the same).
const STAGED_LIMIT = 40 * 1024 * 1024;
const STAGED_ENTRIES = 4096;

function fail(message) {
  process.stderr.write(`stream-relay: ${message}\n`);
  process.exit(2);
}

function parseEndpoints(args) {
  return args.map((arg) => {
    const eq = arg.indexOf("=");
    if (eq < 1 || !arg.slice(eq + 1).startsWith("/")) fail(`argument ${JSON.stringify(arg)} is not <name>=<absolute socket path>`);
    return { name: arg.slice(0, eq), socket: arg.slice(eq + 1) };
  });
}

const out = process.stdout;
const connections = new Map();
let nextChannel = 1;
let outPaused = false;

function frame(channel, kind, payload = Buffer.alloc(0)) {
  const header = Buffer.alloc(HEADER);
  header.writeUInt32BE(channel, 0);
  header.writeUInt8(kind, 4);
  header.writeUInt32BE(payload.length, 5);
  if (!out.write(Buffer.concat([header, payload])) && !outPaused) {
    outPaused = true;
    for (const c of connections.values()) c.socket.pause();
    out.once("drain", () => {
      outPaused = false;
      for (const c of connections.values()) c.socket.resume();
    });
  }
}

function settle(channel) {
  const c = connections.get(channel);
  if (c?.sentClose && c.gotClose) {
    connections.delete(channel);
    c.socket.destroy();
  }
}

function accept(name, socket) {
  const channel = nextChannel++;
  const c = { socket, sentClose: false, gotClose: false };
  connections.set(channel, c);
  frame(channel, KIND.open, Buffer.from(name, "utf8"));
  if (outPaused) socket.pause();
  socket.on("data", (chunk) => {
    for (let i = 0; i < chunk.length; i += MAX_PAYLOAD) frame(channel, KIND.data, chunk.subarray(i, i + MAX_PAYLOAD));
  });
  const closed = () => {
    if (c.sentClose) return;
    c.sentClose = true;
    frame(channel, KIND.close);
    settle(channel);
  };
  socket.on("end", closed);
  socket.on("close", () => {
    closed();
    c.gotClose = true;
    settle(channel);
  });
  socket.on("error", () => undefined); // 'close' follows
}

// The runner's frames on stdin.
let pending = Buffer.alloc(0);
process.stdin.on("data", (chunk) => {
  pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
  while (pending.length >= HEADER) {
    const channel = pending.readUInt32BE(0);
    const kind = pending.readUInt8(4);
    const length = pending.readUInt32BE(5);
    if (length > MAX_PAYLOAD) fail(`a frame of ${length} bytes from the runner`);
    if (pending.length < HEADER + length) break;
    const payload = pending.subarray(HEADER, HEADER + length);
    pending = pending.subarray(HEADER + length);
    if (channel === 0 && !listened && kind === KIND.put) {
      stagePut(payload);
      continue;
    }
    if (channel === 0 && !listened && kind === KIND.data) {
      stageData(payload);
      continue;
    }
    if (kind === KIND.listen && channel === 0 && !listened) {
      if (stage) finishStage();
      const lines = payload
        .toString("utf8")
        .split("\n")
        .filter((l) => l !== "");
      listen(parseEndpoints(lines));
      continue;
    }
    const c = connections.get(channel);
    if (!c) continue; // the connection went away while the runner wrote to it
    if (kind === KIND.data) {
      if (!c.socket.write(payload) && c.socket.writableLength > CONNECTION_BUFFER) {
        process.stdin.pause();
        c.socket.once("drain", () => process.stdin.resume());
      }
    } else if (kind === KIND.close) {
      c.gotClose = true;
      c.socket.end();
      settle(channel);
    }
  }
});
// The runner went away: nothing is served any more.
process.stdin.on("end", () => process.exit(0));

// The staged folder being written: its root, what was written, the file being written.
let stage;

function stagePut(payload) {
  if (stage?.file) fail(`a staged entry began before ${JSON.stringify(stage.file.path)} was whole`);
  let h;
  try {
    h = JSON.parse(payload.toString("utf8"));
  } catch {
    fail("a staged entry's header is not JSON");
  }
  const keys = h !== null && typeof h === "object" ? Object.keys(h).sort().join(",") : "";
  if (keys !== "gid,mode,path,root,size,type,uid") fail("a staged entry's header is not {root,path,type,mode,uid,gid,size}");
  const { root, path, type, mode, uid, gid, size } = h;
  if (typeof root !== "string" || !root.startsWith("/") || posix.normalize(root) !== root || root.includes("\0"))
    fail(`staged root ${JSON.stringify(String(root).slice(0, 200))} is not a plain absolute path`);
  stage ??= { bytes: 0, count: 0, dirs: new Map(), lines: new Map(), file: undefined };
  const shown = JSON.stringify(String(path).slice(0, 200));
  if (typeof path !== "string" || path.length > 4096 || path.includes("\0") || !path.split("/").every((p) => p !== "" && p !== "." && p !== ".."))
    fail(`staged path ${shown} is not a plain relative name`);
  if (type !== "file" && type !== "directory") fail(`staged ${shown} is a ${JSON.stringify(String(type).slice(0, 20))}, not a file or folder`);
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o777) fail(`staged ${shown} has mode ${mode}, not permission bits alone`);
  for (const id of [uid, gid]) if (!Number.isInteger(id) || id < 0 || id > 0x7fffffff) fail(`staged ${shown} has owner ${uid}:${gid}`);
  if (!Number.isInteger(size) || size < 0 || (type === "directory" && size !== 0)) fail(`staged ${shown} has size ${size}`);
  stage.bytes += size;
  if (++stage.count > STAGED_ENTRIES || stage.bytes > STAGED_LIMIT) fail(`the staged folder passes its bounds (${STAGED_ENTRIES} entries, ${STAGED_LIMIT} bytes) at ${shown}`);
  const parent = posix.dirname(path);
  if (parent !== "." && !stage.dirs.has(posix.join(root, parent))) fail(`staged ${shown} comes before its folder`);
  const full = posix.join(root, path);
  try {
    if (type === "directory") {
      // The relay's own until the end: root without CAP_DAC_OVERRIDE writes only in its own folders.
      fs.mkdirSync(full, 0o700);
      stage.dirs.set(full, { mode, uid, gid });
      return;
    }
    const fd = fs.openSync(full, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
    stage.file = { fd, path, full, left: size, size, mode, uid, gid };
  } catch (err) {
    fail(`writing staged ${shown}: ${err.code ?? err.message}`);
  }
  if (size === 0) finishFile();
}

function stageData(payload) {
  const f = stage?.file;
  if (!f) fail("staged bytes with no file to write them to");
  if (payload.length > f.left) fail(`more staged bytes for ${JSON.stringify(f.path)} than its size`);
  for (let at = 0; at < payload.length; ) at += fs.writeSync(f.fd, payload, at, payload.length - at);
  f.left -= payload.length;
  if (f.left === 0) finishFile();
}

// The file's mode and owner (mode first: the owner's change takes root's right to change it), then what is on disk, read back.
function finishFile() {
  const f = stage.file;
  stage.file = undefined;
  fs.fchmodSync(f.fd, f.mode);
  fs.fchownSync(f.fd, f.uid, f.gid);
  const st = fs.fstatSync(f.fd);
  const hash = crypto.createHash("sha256");
  const chunk = Buffer.alloc(MAX_PAYLOAD);
  let at = 0;
  for (let n; (n = fs.readSync(f.fd, chunk, 0, chunk.length, at)) > 0; at += n) hash.update(chunk.subarray(0, n));
  fs.closeSync(f.fd);
  stage.lines.set(f.full, line("file", st, at, hash.digest("hex"), f.full));
}

function line(type, st, size, sha, path) {
  return `${type} ${(st.mode & 0o777).toString(8)} ${st.uid}:${st.gid} ${size} ${sha} ${JSON.stringify(path)}`;
}

// The folders' modes and owners, deepest first (each stays searchable until its own turn), then the digest.
function finishStage() {
  if (stage.file) fail(`the staged file ${JSON.stringify(stage.file.path)} ended short`);
  const dirs = [...stage.dirs.keys()].sort((a, b) => b.split("/").length - a.split("/").length);
  for (const full of dirs) {
    const d = stage.dirs.get(full);
    fs.chmodSync(full, d.mode);
    fs.lchownSync(full, d.uid, d.gid);
    const st = fs.lstatSync(full);
    stage.lines.set(full, line(st.isDirectory() ? "directory" : "other", st, 0, "-", full));
  }
  const hash = crypto.createHash("sha256");
  for (const path of [...stage.lines.keys()].sort()) hash.update(`${stage.lines.get(path)}\n`);
  frame(0, KIND.staged, Buffer.from(hash.digest("hex"), "latin1"));
}

let listened = false;
function listen(endpoints) {
  listened = true;
  if (endpoints.length === 0) return frame(0, KIND.ready);
  let listening = 0;
  for (const e of endpoints) {
    try {
      fs.unlinkSync(e.socket);
    } catch {}
    const server = net.createServer({ allowHalfOpen: true }, (socket) => accept(e.name, socket));
    server.on("error", (err) => fail(`${e.socket}: ${err.code ?? ""} ${err.message}`));
    server.listen(e.socket, () => {
      // The attempt's user connects; the relay runs as another.
      fs.chmodSync(e.socket, 0o666);
      if (++listening === endpoints.length) frame(0, KIND.ready);
    });
  }
}
if (process.argv.length > 2) listen(parseEndpoints(process.argv.slice(2)));
