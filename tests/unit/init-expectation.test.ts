/**
 * The whole init event against the measured init of its kind of run (contract R125): every field a
 * runner never configured, every value it did not set, is invalid-setup naming the field and both
 * values; only the fields that vary per run by nature are left out, and only their shape is held.
 */
import { describe, expect, it } from "vitest";
import { adjudicatorArguments, adjudicatorInitTools } from "../../src/adjudicate/prompt.ts";
import { cliArguments, expectedInitTools } from "../../src/claude/args.ts";
import { expectedInit, INIT_FIELDS_VARYING_PER_RUN, INIT_KINDS, INIT_PARAMETER_FIELDS, type InitKind } from "../../src/claude/init-expectation.ts";
import { initEventFrom } from "../support/init-event.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { SESSION_INIT_TOOLS, sessionArguments } from "../../src/session/args.ts";
import { readTranscript } from "../../src/transcript/reader.ts";
import { baseEvents, evaluate, MODEL, toText, type Event } from "./transcript-fixtures.ts";
import { activeProfile } from "../../src/profile/load.ts";

const GENERATED_INIT_EVENTS = activeProfile().initEvents;

const SESSION_ID = "0b6f4a53-2f55-4c1e-9d0e-6a1f2b3c4d5e";

/** The repository attempt's base transcript with its init changed by `change`. */
function withInit(change: (init: Event) => void): ReturnType<typeof evaluate> {
  const events = baseEvents("repository");
  change(events[0]!);
  return evaluate(toText(events), "repository");
}

describe("the init event is compared whole with the measured init", () => {
  const CHANGED = [
    ["permissionMode", "bypassPermissions"],
    ["agents", ["claude", "Explore", "general-purpose", "Plan", "statusline-setup", "corpus-helper"]],
    ["skills", ["dataviz", "corpus-skill"]],
    ["plugins", [{ name: "corpus-plugin", path: "/workspace/.claude/plugins/p", source: "corpus-plugin@local" }]],
    ["slash_commands", ["dataviz", "corpus-command"]],
    ["output_style", "corpus-style"],
    ["cwd", "/tmp"],
  ] as const;

  // contract: R125
  it("an init with a permission mode, agents, skills, plugins, slash commands, an output style or a cwd the runner never configured is invalid-setup, naming the field and both values", () => {
    for (const [field, value] of CHANGED) {
      const measured = expectedInit("attempt-repository", { model: MODEL }).fields[field];
      const ev = withInit((init) => void (init[field] = value));
      expect([field, ev.classification.status]).toEqual([field, "invalid-setup"]);
      expect(ev.facts.setupProblemCodes).toEqual(["init-field"]);
      expect(ev.facts.setupProblems).toEqual([`init field "${field}" is ${show(value)}; the measured attempt-repository init has ${show(measured)}`]);
    }
  });

  // contract: R125
  it("a field the measured init does not have, or one it has missing, is invalid-setup", () => {
    const extra = withInit((init) => void (init.hooks = { SessionStart: ["/workspace/run.sh"] }));
    expect(extra.classification.status).toBe("invalid-setup");
    expect(extra.facts.setupProblems).toEqual(['init field "hooks" is {"SessionStart":["/workspace/run.sh"]}, a field the measured attempt-repository init does not have']);
    const missing = withInit((init) => void delete init.output_style);
    expect(missing.classification.status).toBe("invalid-setup");
    expect(missing.facts.setupProblems).toEqual(['init field "output_style" is missing; the measured attempt-repository init has "default"']);
  });

  // contract: R125
  it("a field that varies per run is not compared, but must be there in its measured shape", () => {
    const other = withInit((init) => {
      init.uuid = "11111111-2222-4333-8444-555555555555";
      init.session_id = "66666666-7777-4888-9999-aaaaaaaaaaaa";
      init.messaging_socket_path = "/tmp/cc-socks/4242.sock";
    });
    expect(other.classification.status).toBe("completed");
    const moved = withInit((init) => void (init.messaging_socket_path = "/workspace/.sock"));
    expect(moved.classification.status).toBe("invalid-setup");
    expect(moved.facts.setupProblems[0]).toMatch(/^init field "messaging_socket_path" is "\/workspace\/.sock", which does not have the measured shape/);
    const gone = withInit((init) => void delete init.uuid);
    expect(gone.facts.setupProblems).toEqual([`init field "uuid" is missing; the measured attempt-repository init has it (${INIT_FIELDS_VARYING_PER_RUN.uuid!.reason})`]);
  });

  // contract: R125
  it("a field with a dedicated check is reported once, by that check", () => {
    const ev = withInit((init) => void (init.model = "claude-opus-5-5"));
    expect(ev.facts.setupProblemCodes).toEqual(["init-model"]);
    expect(ev.facts.setupProblems).toHaveLength(1);
  });

  // contract: R125
  it("a session call's init carries the session id the runner passed; another id is invalid-setup", () => {
    for (const kind of ["session-start", "session-resume"] as const) {
      const exp = expectedInit(kind, { model: MODEL, sessionId: SESSION_ID });
      const good = initEventFrom(exp, { sessionId: SESSION_ID, uuid: "11111111-2222-4333-8444-555555555555", pid: 17 });
      const reading = (init: Event) => readTranscript(toText([init]), { arm: "repository", model: MODEL, expectedTools: SESSION_INIT_TOOLS, cliVersion: CLAUDE_CODE_VERSION, init: exp });
      expect(reading(good).setupProblemCodes).toEqual(["no-result"]);
      const other = reading({ ...good, session_id: "66666666-7777-4888-9999-aaaaaaaaaaaa" });
      expect(other.setupProblemCodes).toEqual(["init-field", "no-result"]);
      expect(other.setupProblems[0]).toBe(`init field "session_id" is "66666666-7777-4888-9999-aaaaaaaaaaaa"; the measured ${kind} init has "${SESSION_ID}"`);
    }
    expect(() => expectedInit("session-start", { model: MODEL })).toThrow(/session id/);
  });
});

describe("the measured data agrees with the runner's arguments", () => {
  /** Each kind's argument list, as the runner builds it. */
  const argvOf: Record<InitKind, string[]> = {
    "attempt-repository": cliArguments({ arm: "repository", model: MODEL, maxBudgetUsd: 1, prompt: "q", deniedMcpTools: [] }),
    "attempt-mcp": cliArguments({ arm: "mcp", model: MODEL, maxBudgetUsd: 1, prompt: "q", deniedMcpTools: [], mcpConfig: { mcpServers: {} } }),
    adjudicator: adjudicatorArguments({ model: MODEL, maxBudgetUsd: 1, prompt: "q" }),
    "session-start": sessionArguments({ model: MODEL, maxBudgetUsd: 1, sessionId: SESSION_ID, resume: false }),
    "session-resume": sessionArguments({ model: MODEL, maxBudgetUsd: 1, sessionId: SESSION_ID, resume: true }),
  };
  const toolsOf: Record<InitKind, readonly string[]> = {
    "attempt-repository": expectedInitTools("repository"),
    "attempt-mcp": expectedInitTools("mcp"),
    adjudicator: adjudicatorInitTools(),
    "session-start": SESSION_INIT_TOOLS,
    "session-resume": SESSION_INIT_TOOLS,
  };

  // contract: R125
  it("for every kind, the measured tools and permission mode are what its arguments ask for, and the data was measured on the pinned version", () => {
    for (const kind of INIT_KINDS) {
      const fields = GENERATED_INIT_EVENTS.kinds[kind].fields;
      expect([...(fields.tools as string[])].sort()).toEqual([...toolsOf[kind]].sort());
      const argv = argvOf[kind];
      expect(fields.permissionMode).toBe(argv[argv.indexOf("--permission-mode") + 1]);
      expect(fields.claude_code_version).toBe(CLAUDE_CODE_VERSION);
      expect(activeProfile().cliVersion).toBe(CLAUDE_CODE_VERSION);
      // The data never holds a parameter's or a varying field's value: those are per run.
      for (const key of [...Object.keys(INIT_PARAMETER_FIELDS), ...Object.keys(INIT_FIELDS_VARYING_PER_RUN)]) expect(Object.hasOwn(fields, key)).toBe(false);
    }
  });
});

function show(value: unknown): string {
  const text = JSON.stringify(value);
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}
