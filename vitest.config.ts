import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    reporters: ["default", "./tests/support/summary-reporter.ts"],
    setupFiles: ["./tests/support/fast-check-seed.ts"],
    // Docker-backed tests share one engine on a 2-core machine; keep parallelism modest.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Three tiers, each a folder: `npm run test:unit` is the fast one a developer runs while editing
    // (no Docker, no real CLI); `npm test` runs all three, as CI does.
    projects: [
      { extends: true, test: { name: "unit", include: ["tests/unit/**/*.test.ts"] } },
      { extends: true, test: { name: "integration", include: ["tests/integration/**/*.test.ts"] } },
      { extends: true, test: { name: "conformance", include: ["tests/conformance/**/*.test.ts"] } },
    ],
  },
});
