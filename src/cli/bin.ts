#!/usr/bin/env node
// The installed package's command (package.json "bin"): compiled to dist/cli/bin.js by `npm pack`'s
// prepack, it runs with Node alone. A clone runs the sources instead, through bin/study-runner.mjs.
import { main } from "./main.ts";

process.exitCode = await main(process.argv);
