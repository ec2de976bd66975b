/**
 * The installed package's command as one ES module: `dist/cli/study-runner.mjs`, package.json's
 * "bin", made by the package's build (scripts/package.mjs) from the compiled tree beside it, as the
 * tests' compiled runner is (tests/support/compiled-cli.ts). A start of the compiled tree resolves,
 * reads and links some hundreds of modules one by one, most of them the packages' (zod, the MCP
 * SDK and ajv, the statistics): 0.43 s of CPU to load what `run` loads against 0.19 s for the same
 * code as one module (docs/performance.md, "The runner as one module").
 *
 * Every module keeps the place it has in the compiled tree: each bundled module of the tree that
 * reads `import.meta.url` gets its own file's URL, found relative to the bundle at run time, so the
 * paths the code resolves from its own location (the project root, docker/, the demo manifest, the
 * doc-bridge engine beside mcp/, the packages it requires at run time) are the compiled tree's, and
 * the bundle's bytes name no folder. dockerode is not in it: the Docker adapter requires it at run
 * time with two of its parts deferred (src/sandbox/dockerode-load.ts), from Node's module cache.
 * Contract R163.
 */
import { readFile } from "node:fs/promises";
import { dirname, join, relative, sep } from "node:path";
import { BUNDLE_REQUIRE_BANNER, loadEsbuild } from "../mcp/reference-bundle.ts";

/** The bundle's name in the compiled tree's cli/ folder: package.json's "bin". */
export const RUNNER_BUNDLE_NAME = "study-runner.mjs";

/** Packages the bundle leaves to Node at run time: the build's tools (absent from the package) and the optional native parts of ssh2. */
const EXTERNAL = ["esbuild", "typescript", "tsx", "ssh2", "cpu-features", "@grpc/*"];

/**
 * Bundles `<distDir>/cli/bin.js` and everything it imports into `<distDir>/cli/study-runner.mjs`,
 * the packages resolved from the tree's place (its parent's node_modules). Returns the bundle's path.
 */
export async function bundleCompiledRunner(distDir: string): Promise<string> {
  const esbuild = loadEsbuild();
  const outfile = join(distDir, "cli", RUNNER_BUNDLE_NAME);
  const tree = `${distDir}${sep}`;
  const result = await esbuild.build({
    entryPoints: [join(distDir, "cli", "bin.js")],
    outfile,
    // The names esbuild gives the modules inside are paths from here: the same bytes for every tree.
    absWorkingDir: distDir,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external: EXTERNAL,
    // Comments and whitespace out (they carry paths), names kept for stack traces.
    minifyWhitespace: true,
    minifySyntax: true,
    logLevel: "silent",
    banner: { js: BUNDLE_REQUIRE_BANNER },
    plugins: [
      {
        name: "own-module-url",
        setup(build) {
          build.onLoad({ filter: /\.js$/ }, async (args) => {
            if (!args.path.startsWith(tree)) return undefined;
            const text = await readFile(args.path, "utf8");
            // Read once: a module that does not read its URL goes in as it is.
            if (!text.includes("import.meta.url")) return { contents: text, loader: "js" };
            // Replaced in the syntax tree, not in the text: a string that spells it stays as it is.
            const own = await esbuild.transform(text, { loader: "js", format: "esm", target: "node20", define: { "import.meta.url": "__ownModuleUrl" } });
            const fromBundle = relative(dirname(outfile), args.path).split(sep).join("/");
            return { contents: `const __ownModuleUrl = new URL(${JSON.stringify(fromBundle)}, import.meta.url).href;\n${own.code}`, loader: "js" };
          });
        },
      },
    ],
  });
  if (result.errors.length > 0) throw new Error(`the runner could not be bundled in ${distDir}: ${result.errors.map((e) => e.text).join("; ")}`);
  return outfile;
}
