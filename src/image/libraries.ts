import { runChild } from "../process/child.ts";

/**
 * The shared libraries a dynamic executable loads, as the absolute paths the loader
 * resolves them to on this host, the dynamic loader itself included (a scratch image has
 * none of its own). `linux-vdso` is provided by the kernel and skipped. A static binary
 * yields []. A library that cannot be found fails: an image without it would not start.
 */
export async function collectLibraries(binaryPath: string): Promise<string[]> {
  let stdout: string;
  try {
    stdout = (await runChild("ldd", [binaryPath], { env: { ...process.env, LC_ALL: "C" }, timeoutMs: 60_000, maxOutputBytes: 1024 * 1024 })).stdout.toString("utf8");
  } catch (err) {
    // glibc's ldd exits 1 for a static binary and says so; anything else is a real failure.
    const out = `${(err as { stdout?: string }).stdout ?? ""}${(err as { stderr?: string }).stderr ?? ""}`;
    if (/not a dynamic executable|statically linked/.test(out)) return [];
    throw new Error(`ldd ${binaryPath} failed: ${out.trim() || String(err)}`);
  }
  return parseLdd(stdout, binaryPath);
}

export function parseLdd(output: string, binaryPath = "the binary"): string[] {
  const libs = new Set<string>();
  const missing: string[] = [];
  for (const raw of output.split("\n")) {
    const line = raw.trim();
    if (line === "" || /statically linked/.test(line)) continue;
    const arrow = /^(\S+) => (.*)$/.exec(line);
    if (arrow) {
      const target = arrow[2]!.trim();
      if (target.startsWith("not found")) {
        missing.push(arrow[1]!);
        continue;
      }
      const path = /^(\/\S+) \(0x[0-9a-f]+\)$/.exec(target)?.[1];
      // `name =>  (0x…)` with no path is a kernel-provided object (the vDSO).
      if (path) libs.add(path);
      continue;
    }
    const direct = /^(\S+) \(0x[0-9a-f]+\)$/.exec(line)?.[1];
    if (direct === undefined) throw new Error(`unexpected ldd line for ${binaryPath}: ${JSON.stringify(line)}`);
    // The loader itself appears as an absolute path; the vDSO as a bare name.
    if (direct.startsWith("/")) libs.add(direct);
  }
  if (missing.length > 0) throw new Error(`${binaryPath} needs libraries this host lacks: ${missing.join(", ")}`);
  return [...libs].sort();
}
