import { defineConfig } from "vitest/config";
import { suiteTmpdir } from "./tests/support/suite-tmpdir.ts";

// The suite's temporary files on a tmpfs where the machine has one with room, for vitest, its
// workers and every process they start (tests/support/suite-tmpdir.ts says why).
const tmp = suiteTmpdir();
if (tmp) process.env.TMPDIR = tmp;

export default defineConfig({
  test: {
    reporters: ["default", "./tests/support/summary-reporter.ts"],
    // The seed of property tests (fixed in CI); after each file, a check that it left no inherited
    // key on the prototypes, which the unit tier's shared workers would hand to the files after it.
    setupFiles: ["./tests/support/fast-check-seed.ts", "./tests/support/prototype-guard.ts"],
    // Docker-backed tests share one engine on a 2-core machine. Three files at once: with two the
    // cores stood idle a third of the time in places (tests that wait on time limits, signals and
    // sleeps in the engine), and a third worker took the whole suite from 1,108 s to 918 s on a
    // fresh clone (docs/performance.md, "The test suite"); the CPU then stays about 93% busy.
    maxWorkers: 3,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Four tiers, each a folder (CONTRIBUTING.md, "Tests"): `npm run test:unit` is the fast one a
    // developer runs while editing (no Docker, no real CLI); `host` runs real processes, git, sockets,
    // the MCP server and the CLI on this machine with no container engine; `integration` needs the
    // Docker engine; `conformance` runs the real pinned Claude Code CLI. `npm test` runs all four, as CI does.
    projects: [
      // The unit files share their workers (no new process and module graph per file): the tier took
      // 80 → 50 s of CPU (docs/performance.md, "The test suite"). The host tier stays isolated: its
      // files start processes, and a worker grown by many files made each start cost more.
      { extends: true, test: { name: "unit", include: ["tests/unit/**/*.test.ts"], isolate: false } },
      // No engine in reach: a host test that starts needing Docker fails here instead of passing by chance.
      // Its CLI starts use the compiled runner too: through the launcher the tier took 172 s of CPU, 99 s
      // alone, against 99 s and 55 s (docs/performance.md, "The host tier's CLI starts compiled").
      {
        extends: true,
        test: {
          name: "host",
          include: ["tests/host/**/*.test.ts"],
          globalSetup: ["./tests/support/compiled-cli-setup.ts", "./tests/support/run-folder-setup.ts"],
          env: { DOCKER_HOST: "unix:///nonexistent/host-tier-has-no-docker-engine.sock" },
        },
      },
      // One demo per run, made in the tier's run folder and shared by the tests that only read a demo's outputs (tests/support/shared-demo.ts);
      // the compiled runner that these two tiers' CLI starts use, as the host tier's, built before the tests (tests/support/compiled-cli.ts).
      // Their files share their workers as the unit tier's do: a new worker per file cost about 0.4 s of CPU to
      // start and load its modules again, and the integration tier alone took 513 → 502 s, 559 → 541 s of CPU
      // (docs/performance.md, "Shared workers, the guide's engine and a per-file build"). The host tier, tried
      // again the same way, showed no gain beyond the machine's drift from run to run (shared 41.7 and 47.8 s,
      // isolated 43.7-46.5 s, the page cache dropped before each) and stays isolated.
      {
        extends: true,
        test: { name: "integration", isolate: false, include: ["tests/integration/**/*.test.ts"], globalSetup: ["./tests/support/run-folder-setup.ts", "./tests/support/compiled-cli-setup.ts"] },
      },
      { extends: true, test: { name: "conformance", isolate: false, include: ["tests/conformance/**/*.test.ts"], globalSetup: ["./tests/support/compiled-cli-setup.ts"] } },
    ],
  },
});
