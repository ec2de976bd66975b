import { execFile, execFileSync } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The Debian chromium binary, installed with apt-get when missing (tests may not skip). */
export function ensureChromium(): string {
  const find = () => {
    try {
      return execFileSync("sh", ["-c", "command -v chromium || command -v chromium-browser"], { encoding: "utf8" }).trim();
    } catch {
      return "";
    }
  };
  let bin = find();
  if (!bin) {
    execFileSync("apt-get", ["update", "-qq"], { stdio: "ignore" });
    execFileSync("apt-get", ["install", "-y", "-qq", "chromium"], { stdio: "ignore", env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } });
    bin = find();
  }
  if (!bin) throw new Error("chromium is not installed and apt-get install chromium did not provide it");
  return bin;
}

/** Headless flags: no sandbox (root in a container), no GPU, no network activity of its own. */
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--hide-scrollbars", "--no-first-run", "--disable-extensions"];

export async function screenshot(bin: string, fileUrl: string, out: string, size = "1000,3000"): Promise<void> {
  await run(bin, [...FLAGS, `--window-size=${size}`, `--screenshot=${out}`, fileUrl], { timeout: 120_000 });
}

/** The DOM after Chromium parsed and laid out the page. */
export async function dumpDom(bin: string, fileUrl: string): Promise<string> {
  const { stdout } = await run(bin, [...FLAGS, "--dump-dom", fileUrl], { timeout: 120_000, maxBuffer: 32 * 1024 * 1024 });
  return stdout;
}
