#!/usr/bin/env node
// The installed package's command: compiled to dist/cli/bin.js by `npm pack`'s prepack, then bundled
// with all it imports into dist/cli/study-runner.mjs (package.json "bin", src/cli/runner-bundle.ts),
// it runs with Node alone. A clone runs the sources instead, through bin/study-runner.mjs.
import { main } from "./main.ts";

process.exitCode = await main(process.argv);
