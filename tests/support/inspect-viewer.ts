import { readdir, readFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname, extname, join } from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import puppeteer, { type Browser } from "puppeteer-core";
import { build } from "vite";
import { ensureChromium } from "./chromium.ts";

/**
 * Inspect's log viewer, for checking the logs `report --format inspect` writes (the schema is in
 * inspect-schema.ts): Inspect's log viewer from the npm registry (@metrevals/inspect-log-viewer, a devDependency), bundled here
 * with vite into the static page `inspect view bundle` deploys, served on loopback and opened in
 * Debian's Chromium through puppeteer-core.
 */

const HERE = dirname(fileURLToPath(import.meta.url));
/**
 * Bundles the viewer package's App (tests/support/inspect-viewer/main.js) into `outDir`. The package
 * keeps its own React 19 under its folder when the project's tree hoists another one, so React
 * resolves from the package: the app and the viewer must share one React.
 */
export async function buildInspectViewer(outDir: string): Promise<void> {
  const viewerEntry = fileURLToPath(import.meta.resolve("@metrevals/inspect-log-viewer"));
  const fromViewer = createRequire(viewerEntry);
  const react = dirname(fromViewer.resolve("react/package.json"));
  const reactDom = dirname(fromViewer.resolve("react-dom/package.json"));
  await build({
    root: join(HERE, "inspect-viewer"),
    base: "./",
    configFile: false,
    logLevel: "error",
    resolve: {
      alias: [
        { find: /^react$/, replacement: react },
        { find: /^react\/(.*)$/, replacement: `${react}/$1` },
        { find: /^react-dom$/, replacement: reactDom },
        { find: /^react-dom\/(.*)$/, replacement: `${reactDom}/$1` },
      ],
    },
    build: { outDir, emptyOutDir: true, chunkSizeWarningLimit: 100_000, reportCompressedSize: false },
  });
}

/**
 * The `listing.json` Inspect's `write_log_listing` (inspect_ai/log/_file.py at 0.3.180) writes for
 * a log folder served as static files: per log file, its overview (header fields and the first
 * metric of the first scorer).
 */
async function listing(logDir: string): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const name of (await readdir(logDir)).filter((f) => f.endsWith(".json"))) {
    const log = JSON.parse(await readFile(join(logDir, name), "utf8"));
    const metrics = log.results?.scores?.[0]?.metrics;
    out[name] = {
      eval_id: log.eval.eval_id,
      run_id: log.eval.run_id,
      task: log.eval.task,
      task_id: log.eval.task_id,
      task_version: log.eval.task_version,
      version: log.version,
      status: log.status,
      invalidated: log.invalidated,
      error: log.error,
      model: log.eval.model,
      started_at: log.stats.started_at,
      completed_at: log.stats.completed_at,
      primary_metric: metrics ? (Object.values(metrics)[0] ?? null) : null,
    };
  }
  return out;
}

const TYPES: Record<string, string> = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json" };

/** Serves the built viewer at `/` and the log folder at `/logs/` on 127.0.0.1. */
export async function serveInspectViewer(viewerDir: string, logDir: string): Promise<{ url: string; close: () => Promise<void> }> {
  const server: Server = createServer(async (req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://127.0.0.1").pathname);
    try {
      let body: string | Buffer;
      if (path === "/logs/listing.json") body = JSON.stringify(await listing(logDir));
      else if (path.startsWith("/logs/") && !path.slice(6).includes("/")) body = await readFile(join(logDir, path.slice(6)));
      else if (path === "/" || path === "/index.html" || /^\/assets\/[\w.-]+$/.test(path)) body = await readFile(join(viewerDir, path === "/" ? "index.html" : path));
      else throw new Error("not served");
      res.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream" });
      res.end(body);
    } catch {
      res.writeHead(404);
      res.end("not found");
    }
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/index.html`, close: () => new Promise((ok) => server.close(() => ok())) };
}

export async function launchChromium(): Promise<Browser> {
  return puppeteer.launch({
    executablePath: ensureChromium(),
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run", "--disable-extensions"],
  });
}
