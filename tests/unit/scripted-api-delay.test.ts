import { afterEach, describe, expect, it } from "vitest";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { demoScripts } from "../../src/demo/real-cli.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";

/** The scripted API as the concurrency benchmark uses it: each turn after a delay, each attempt its own task's conversation. */

let api: ScriptedApi | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

const ask = (url: string, text: string, tools: string[] = []) =>
  fetch(`${url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "claude-haiku-5-5", max_tokens: 100, messages: [{ role: "user", content: text }], tools: tools.map((name) => ({ name, input_schema: { type: "object" } })) }),
  }).then((r) => r.json() as Promise<{ content: Array<{ type: string; name?: string }> }>);

describe("the scripted API for concurrent attempts", () => {
  it("answers each Messages request after the configured delay, requests in parallel waiting side by side", async () => {
    api = await startScriptedApi({ port: 0, turnDelayMs: 400, script: { name: "s", marker: "question", turns: [{ answer: "a", usage: { input_tokens: 1, output_tokens: 1 } }] } });
    const t0 = Date.now();
    await Promise.all([ask(api.url!, "question one"), ask(api.url!, "question two"), ask(api.url!, "question three")]);
    const ms = Date.now() - t0;
    expect(ms).toBeGreaterThanOrEqual(390);
    expect(ms).toBeLessThan(1200);
  });

  it("the demo's scripts pick each attempt's conversation by its task's question and arm, in whatever order attempts arrive", async () => {
    const { manifest } = await loadManifest(DEMO_MANIFEST);
    const plan = planStudy(manifest, "full");
    api = await startScriptedApi({ port: 0, script: demoScripts(manifest, plan) });
    const last = manifest.tasks.at(-1)!;
    const first = manifest.tasks[0]!;
    // The last task's doc-bridge arm first, then the first task's repository arm.
    const mcp = await ask(api.url!, `Question:\n${last.question}`, ["Read", "mcp__doc-bridge__doc_search"]);
    expect(mcp.content.find((c) => c.type === "tool_use")?.name).toBe("mcp__doc-bridge__doc_search");
    const repo = await ask(api.url!, `Question:\n${first.question}`, ["Read", "Glob"]);
    expect(repo.content.find((c) => c.type === "tool_use")?.name).toBe("Glob");
    expect(api.requests.map((r) => r.answer.kind === "tool-calls" && r.answer.script)).toEqual([`task-${manifest.tasks.length - 1}-mcp`, "task-0-repository"]);
  });
});
