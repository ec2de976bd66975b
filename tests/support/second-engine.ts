import { execFile, spawn } from "node:child_process";
import { existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { homedir, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { lock } from "proper-lockfile";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { makeTestCa } from "./test-ca.ts";

const run = promisify(execFile);

/**
 * A second Docker engine on this machine that shares no files with the runner: a dockerd in a
 * mount namespace of its own, where the runner's temporary folder, HOME, /home and the folder
 * holding the checkout are empty tmpfs mounts (../shared/facts/second-docker-engine.md). It is
 * reached by its own unix socket under /run, which both namespaces see, with its own data and
 * exec roots, no bridge and no iptables. It also listens on tcp://127.0.0.1:<a free port> with
 * `--tlsverify`, its server certificate for 127.0.0.1 and its callers' client certificates from a
 * test CA made at its start (secondEngineTls). gVisor's runsc is registered on it as on the local
 * engine (.ci/run): `--platform=ptrace --network=none --host-uds=open`. Started once and left
 * running for later test files (about 8 s); it needs root, as CI is.
 */
export const SECOND_ENGINE_DIR = "/run/study-runner-second-engine";
export const SECOND_ENGINE_HOST = `unix://${SECOND_ENGINE_DIR}/docker.sock`;
const DATA_ROOT = "/var/lib/study-runner-second-engine";
const TLS_DIR = `${SECOND_ENGINE_DIR}/tls`;
/** The folder a caller names in DOCKER_CERT_PATH: ca.pem, cert.pem, key.pem. */
const CLIENT_CERT_DIR = `${TLS_DIR}/client`;
/** The engine's daemon config: its runtimes. Under /run, which its namespace sees (its /tmp is masked). */
const DAEMON_CONFIG = `${SECOND_ENGINE_DIR}/daemon.json`;

/** runsc's path on this machine (the engine shares the runner's /usr), or undefined when gVisor is not installed. */
function runscPath(): string | undefined {
  return (process.env.PATH ?? "/usr/bin")
    .split(":")
    .map((dir) => join(dir, "runsc"))
    .find((path) => existsSync(path));
}

/**
 * The folders the second engine's namespace hides: what the runner's containers reach by path
 * today. A folder inside another one is hidden with it and left out: once its parent is an empty
 * tmpfs there is no mount point left to mount on (a checkout under /tmp, as in /tmp/ci/clone,
 * kept the engine from starting).
 */
export function maskedFolders(o: { tmp: string; home: string; projectRoot: string } = { tmp: tmpdir(), home: homedir(), projectRoot: PROJECT_ROOT }): string[] {
  const folders = [...new Set([o.tmp, o.home, "/home", dirname(o.projectRoot)])];
  return folders.filter((f) => !folders.some((outer) => outer !== f && (outer === "/" || f.startsWith(`${outer}/`))));
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The runtimes the engine offers, or undefined when it does not answer. */
async function answers(): Promise<string[] | undefined> {
  try {
    const { stdout } = await run("docker", ["-H", SECOND_ENGINE_HOST, "info", "--format", "{{json .Runtimes}}"], { timeout: 10_000 });
    return Object.keys(JSON.parse(stdout) as Record<string, unknown>);
  } catch {
    return undefined;
  }
}

/** Where the running engine keeps the folders it hides: one started for another checkout hides another checkout's parent. */
const MASKED_FILE = `${SECOND_ENGINE_DIR}/masked.json`;

function masksThese(folders: string[]): boolean {
  try {
    const masked = JSON.parse(readFileSync(MASKED_FILE, "utf8")) as string[];
    return folders.every((f) => masked.includes(f));
  } catch {
    return false;
  }
}

/** How a caller reaches the running engine over TLS: DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH. */
export function secondEngineTls(): { DOCKER_HOST: string; DOCKER_TLS_VERIFY: string; DOCKER_CERT_PATH: string } {
  const port = Number(readFileSync(`${TLS_DIR}/port`, "utf8"));
  return { DOCKER_HOST: `tcp://127.0.0.1:${port}`, DOCKER_TLS_VERIFY: "1", DOCKER_CERT_PATH: CLIENT_CERT_DIR };
}

/** A port free on 127.0.0.1 now (never another address). */
async function freeLoopbackPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

/** A fresh test CA: the engine's certificate for 127.0.0.1 and a client's, private files of root. */
async function writeTls(): Promise<number> {
  rmSync(TLS_DIR, { recursive: true, force: true });
  mkdirSync(CLIENT_CERT_DIR, { recursive: true, mode: 0o700 });
  const ca = makeTestCa({ client: true });
  const files: Record<string, string> = {
    "ca.pem": ca.ca,
    "server-cert.pem": ca.cert,
    "server-key.pem": ca.key,
    "client/ca.pem": ca.ca,
    "client/cert.pem": ca.client!.cert,
    "client/key.pem": ca.client!.key,
  };
  for (const [name, text] of Object.entries(files)) writeFileSync(join(TLS_DIR, name), text, { mode: 0o600, flag: "wx" });
  const port = await freeLoopbackPort();
  writeFileSync(`${TLS_DIR}/port`, String(port), { mode: 0o600, flag: "wx" });
  return port;
}

/**
 * Starts the engine unless it answers already hiding this checkout's folders (else restarts it);
 * resolves to its DOCKER_HOST. Test files in parallel workers call it at once: one starts the
 * engine under a lock beside its folder, the others wait and find it answering.
 */
export async function startSecondEngine(): Promise<string> {
  const release = await lock(SECOND_ENGINE_DIR, { realpath: false, stale: 30_000, retries: { retries: 600, minTimeout: 200, maxTimeout: 500 } });
  try {
    return await startUnlocked();
  } finally {
    await release();
  }
}

async function startUnlocked(): Promise<string> {
  const folders = maskedFolders();
  const runsc = runscPath();
  const runtimes = await answers();
  if (runtimes) {
    // One started by an older checkout may lack runsc: it is restarted with it.
    if (masksThese(folders) && existsSync(`${TLS_DIR}/port`) && (runsc === undefined || runtimes.includes("runsc"))) return SECOND_ENGINE_HOST;
    const pid = Number(readFileSync(`${SECOND_ENGINE_DIR}/docker.pid`, "utf8"));
    process.kill(pid, "SIGTERM");
    // Until the process is gone: its pid file and exec root are the new engine's.
    for (let i = 0; i < 120 && isAlive(pid); i++) await new Promise((r) => setTimeout(r, 500));
  }
  mkdirSync(`${SECOND_ENGINE_DIR}/exec`, { recursive: true });
  writeFileSync(MASKED_FILE, JSON.stringify(folders));
  mkdirSync(DATA_ROOT, { recursive: true });
  const port = await writeTls();
  // As .ci/run registers it on the local engine (docs/isolation.md, "gVisor").
  const config = runsc ? { runtimes: { runsc: { path: runsc, runtimeArgs: ["--platform=ptrace", "--network=none", "--host-uds=open"] } } } : {};
  writeFileSync(DAEMON_CONFIG, JSON.stringify(config));
  const masks = folders.map((f) => `mount -t tmpfs -o size=16m tmpfs '${f}'`).join(" && ");
  const tls = `-H tcp://127.0.0.1:${port} --tlsverify --tlscacert ${TLS_DIR}/ca.pem --tlscert ${TLS_DIR}/server-cert.pem --tlskey ${TLS_DIR}/server-key.pem`;
  const script = `mount --make-rprivate / && ${masks} && exec dockerd --bridge=none --iptables=false --data-root ${DATA_ROOT} --exec-root ${SECOND_ENGINE_DIR}/exec --pidfile ${SECOND_ENGINE_DIR}/docker.pid --config-file ${DAEMON_CONFIG} -H ${SECOND_ENGINE_HOST} ${tls}`;
  const log = openSync(`${SECOND_ENGINE_DIR}/dockerd.log`, "a");
  const child = spawn("unshare", ["-m", "sh", "-c", script], { detached: true, stdio: ["ignore", log, log] });
  child.unref();
  for (let i = 0; i < 120; i++) {
    if (await answers()) return SECOND_ENGINE_HOST;
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`the second Docker engine did not answer at ${SECOND_ENGINE_HOST}; see ${SECOND_ENGINE_DIR}/dockerd.log`);
}
