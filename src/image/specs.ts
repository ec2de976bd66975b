import { access, open, readdir, readFile, realpath } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CLAUDE_CODE_VERSION, claudeCodeImageRef } from "../claude/version.ts";
import { RefusalError } from "../util/errors.ts";
import { defaultCacheDir } from "../util/cache-dir.ts";
import { fileSha256, type ImageDir, type ImageFile, type ImageSpec } from "./context.ts";
import { collectLibraries } from "./libraries.ts";

/** Where things live inside both images; the attempt stage mounts and runs against these. */
export const IMAGE_LAYOUT = {
  claude: "/usr/local/bin/claude",
  node: "/usr/local/bin/node",
  helpers: "/opt/study-runner",
  workspace: "/workspace",
  home: "/home/agent",
  uid: 1000,
  gid: 1000,
  user: "1000:1000",
} as const;

export const IMAGE_LABELS = {
  /** Set at build time (not in the Dockerfile): the sha256 of the build context. */
  contextDigest: "study-runner.context-digest",
  kind: "study-runner.image-kind",
  claudeVersion: "study-runner.claude-version",
  /** sha256 hex of what /usr/local/bin/claude is in the image. */
  claudeSha256: "study-runner.claude-sha256",
} as const;

const REPO_ROOT = fileURLToPath(new URL("../../", import.meta.url));
export const DEFAULT_HELPERS_DIR = join(REPO_ROOT, "docker", "helpers");

/** The native package the `@anthropic-ai/claude-code` wrapper installs on linux-x64 glibc. */
const NATIVE_PACKAGE = "@anthropic-ai/claude-code-linux-x64";

export interface FoundClaudeBinary {
  path: string;
  version: string;
  packageDir: string;
}

export interface FindClaudeOptions {
  version?: string;
  /** Directories whose node_modules are searched; default: the current directory and the repository. */
  roots?: string[];
  /** Default: `$STUDY_RUNNER_CACHE`, else `$XDG_CACHE_HOME/study-runner`, else `~/.cache/study-runner`. */
  cacheDir?: string;
}

export { defaultCacheDir };

/**
 * Finds the native Claude Code binary of the pinned version without downloading:
 * `node_modules/@anthropic-ai/claude-code-linux-x64/claude` under each root (also nested
 * under the wrapper package), then `<cache>/claude-code-<version>/node_modules/…`, which
 * `npm install --prefix <cache>/claude-code-<version> @anthropic-ai/claude-code-linux-x64@<version>`
 * creates. Returns undefined when there is no candidate at all; throws `RefusalError`
 * when candidates exist but none is an ELF binary of the pinned version (fail closed:
 * a wrong version must never be built into the pinned image).
 */
export async function findClaudeBinary(opts: FindClaudeOptions = {}): Promise<FoundClaudeBinary | undefined> {
  const version = opts.version ?? CLAUDE_CODE_VERSION;
  const roots = opts.roots ?? [process.cwd(), REPO_ROOT];
  const packageDirs = [
    ...roots.flatMap((r) => [join(r, "node_modules", NATIVE_PACKAGE), join(r, "node_modules", "@anthropic-ai", "claude-code", "node_modules", NATIVE_PACKAGE)]),
    join(opts.cacheDir ?? defaultCacheDir(), `claude-code-${version}`, "node_modules", NATIVE_PACKAGE),
  ];
  const problems: string[] = [];
  for (const packageDir of [...new Set(packageDirs)]) {
    let pkg: { name?: unknown; version?: unknown };
    try {
      pkg = JSON.parse(await readFile(join(packageDir, "package.json"), "utf8")) as typeof pkg;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") continue;
      problems.push(`${packageDir}: unreadable package.json (${String(err)})`);
      continue;
    }
    const path = join(packageDir, "claude");
    if (pkg.name !== NATIVE_PACKAGE || pkg.version !== version) {
      problems.push(`${packageDir}: is ${String(pkg.name)}@${String(pkg.version)}, not ${NATIVE_PACKAGE}@${version}`);
    } else if (!(await isElf(path))) {
      problems.push(`${path}: missing or not an ELF executable`);
    } else {
      return { path: await realpath(path), version, packageDir };
    }
  }
  if (problems.length > 0) throw new RefusalError(`no usable Claude Code ${version} binary: ${problems.join("; ")}`, problems);
  return undefined;
}

async function isElf(path: string): Promise<boolean> {
  try {
    const fh = await open(path, "r");
    try {
      const { buffer, bytesRead } = await fh.read(Buffer.alloc(4), 0, 4, 0);
      return bytesRead === 4 && buffer.equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]));
    } finally {
      await fh.close();
    }
  } catch {
    return false;
  }
}

export interface BaseImageInput {
  /** Default: the Node running the runner, for the helpers in /opt/study-runner. */
  nodeBinary?: string;
  /** Default: docker/helpers of this repository; every `*.mjs` and `*.cjs` in it is copied. */
  helpersDir?: string;
}

const PASSWD = `root:x:0:0:root:/root:/nonexistent\nagent:x:${IMAGE_LAYOUT.uid}:${IMAGE_LAYOUT.gid}:agent:${IMAGE_LAYOUT.home}:/nonexistent\n`;
const GROUP = `root:x:0:\nagent:x:${IMAGE_LAYOUT.gid}:\n`;

/** Files shared by both images: Node and its libraries, users, helpers, and the empty dirs. */
export async function baseLayout(input: BaseImageInput, extraBinaries: string[]): Promise<{ files: ImageFile[]; dirs: ImageDir[] }> {
  const nodeBinary = input.nodeBinary ?? process.execPath;
  const helpersDir = input.helpersDir ?? DEFAULT_HELPERS_DIR;
  const libraries = new Set<string>();
  for (const binary of [nodeBinary, ...extraBinaries]) for (const lib of await collectLibraries(binary)) libraries.add(lib);
  const files: ImageFile[] = [
    { path: IMAGE_LAYOUT.node, mode: 0o755, source: { hostPath: nodeBinary } },
    { path: "/etc/passwd", mode: 0o644, source: { content: PASSWD } },
    { path: "/etc/group", mode: 0o644, source: { content: GROUP } },
    ...[...libraries].sort().map((lib): ImageFile => ({ path: lib, mode: 0o755, source: { hostPath: lib } })),
  ];
  let helperNames: string[] = [];
  try {
    helperNames = (await readdir(helpersDir)).filter((n) => n.endsWith(".mjs") || n.endsWith(".cjs")).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  for (const name of helperNames) {
    files.push({ path: `${IMAGE_LAYOUT.helpers}/${name}`, mode: 0o644, source: { hostPath: join(helpersDir, name) } });
  }
  const dirs: ImageDir[] = [
    { path: "/tmp", mode: 0o1777 },
    { path: IMAGE_LAYOUT.workspace, mode: 0o755 },
    { path: IMAGE_LAYOUT.home, mode: 0o755, userOwned: true },
    { path: IMAGE_LAYOUT.helpers, mode: 0o755 },
  ];
  return { files, dirs };
}

export function imageSpec(tag: string, layout: { files: ImageFile[]; dirs: ImageDir[] }, labels: Record<string, string>): ImageSpec {
  return {
    tag,
    ...layout,
    user: IMAGE_LAYOUT.user,
    env: {
      // The pinned version must not update itself (contract R13), and nothing but the
      // model API should be contacted.
      DISABLE_AUTOUPDATER: "1",
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      HOME: IMAGE_LAYOUT.home,
      PATH: "/usr/local/bin:/usr/bin:/bin",
    },
    entrypoint: [IMAGE_LAYOUT.claude],
    workdir: IMAGE_LAYOUT.workspace,
    labels,
  };
}

export interface ClaudeImageInput extends BaseImageInput {
  /** The native binary, e.g. from `findClaudeBinary()`. */
  claudeBinary: string;
  version?: string;
  /** CA bundle to ship (default: the host's Debian bundle when present; null: none). */
  caBundle?: string | null;
}

/**
 * `study-runner/claude-code:<version>`: the native Claude Code binary with the glibc files
 * it loads (measured: it needs nothing else), Node for the helpers, user 1000.
 */
export async function claudeCodeImageSpec(input: ClaudeImageInput): Promise<ImageSpec> {
  const version = input.version ?? CLAUDE_CODE_VERSION;
  const layout = await baseLayout(input, [input.claudeBinary]);
  layout.files.push({ path: IMAGE_LAYOUT.claude, mode: 0o755, source: { hostPath: input.claudeBinary } });
  // A real pilot talks TLS to the model's API; the scratch image has no CA store of its own.
  // Whether the binary uses a bundled store or this file was not measured (only http to a
  // scripted API was), so the host's bundle is shipped at the Debian path when present.
  const caBundle = input.caBundle === undefined ? "/etc/ssl/certs/ca-certificates.crt" : input.caBundle;
  if (caBundle && (await exists(caBundle))) {
    layout.files.push({ path: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644, source: { hostPath: caBundle } });
  }
  return imageSpec(claudeCodeImageRef(version), layout, {
    [IMAGE_LABELS.kind]: "claude-code",
    [IMAGE_LABELS.claudeVersion]: version,
    [IMAGE_LABELS.claudeSha256]: await fileSha256(input.claudeBinary),
  });
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}
