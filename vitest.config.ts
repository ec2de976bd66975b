import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["tests/**/*.test.ts"],
    reporters: ["default", "./tests/support/summary-reporter.ts"],
    setupFiles: ["./tests/support/fast-check-seed.ts"],
    // Docker-backed tests share one engine on a 2-core machine; keep parallelism modest.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
