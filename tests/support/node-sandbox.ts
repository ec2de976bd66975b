import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import type { SandboxSpec } from "../../src/sandbox/sandbox.ts";

/** A hardened sandbox of `image` (one with Node, as the fake claude image) that runs `script` with `node -e` as uid 1000, network none. */
export function nodeScriptSpec(image: string, labels: Record<string, string>, script: string, extra: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    image,
    entrypoint: [IMAGE_LAYOUT.node, "-e", script],
    cmd: [],
    env: {},
    user: "1000:1000",
    memoryVolumes: [],
    endpoints: [],
    limits: { pidsLimit: 64 },
    security: { readOnlyRoot: true, dropAllCapabilities: true, noNewPrivileges: true },
    network: { mode: "none" },
    labels,
    ...extra,
  };
}
