/**
 * The generated request shapes against the REAL Claude Code 2.1.296, re-measured on every run in
 * every scenario the runner uses (src/calibrate/scenarios.ts, as `study-runner calibrate` runs them: the study pilot of both
 * arms, the adjudicator, sessions with a resume): what the binary sends must be exactly what
 * the pin's calibration profile (src/profile/) holds, and every request it sent must pass the gateway's
 * own checks. A new CLI version, or a change in how the runner drives it, fails here first;
 * calibrate again (docs/conformance.md, "Moving the pin").
 */
import { beforeAll, describe, expect, it } from "vitest";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { headerProblem, shapeProblem, targetProblem } from "../../src/gateway/request-shape.ts";
import type { RecordedRequest } from "../../src/stand-ins/scripted-api/server.ts";
import type { JsonValue } from "../../src/util/strict-json.ts";
import { SCENARIOS, shapesOf } from "../../src/calibrate/requests.ts";
import { measureRequests } from "./measure.ts";
import { activeProfile } from "../../src/profile/load.ts";

const CLI_REQUEST_SHAPES = activeProfile().requestShapes;

let requests: RecordedRequest[] = [];

beforeAll(async () => {
  requests = await measureRequests();
}, 600_000);

describe("the generated request shapes are what the pinned CLI sends", () => {
  it("are the profile of this CLI version, measured over every scenario", () => {
    expect(activeProfile().cliVersion).toBe(CLAUDE_CODE_VERSION);
    expect(CLI_REQUEST_SHAPES.scenarios).toEqual(SCENARIOS);
  });

  // contract: R140
  it("the re-measured targets, header names, anthropic-beta values and body shape equal the generated ones", () => {
    expect(requests.length).toBeGreaterThan(10);
    const now = shapesOf(requests);
    expect(now.requests).toEqual(CLI_REQUEST_SHAPES.requests);
    expect(now.headers).toEqual(CLI_REQUEST_SHAPES.headers);
    expect(now.anthropicBeta).toEqual(CLI_REQUEST_SHAPES.anthropicBeta);
    expect(now.body).toEqual(CLI_REQUEST_SHAPES.body);
  });

  it("every request the CLI sent passes the gateway's checks of target, headers and body", () => {
    for (const r of requests) {
      expect(targetProblem(CLI_REQUEST_SHAPES, r.method, r.path), r.path).toBeNull();
      const raw = Object.entries(r.headers).flat();
      expect(headerProblem(CLI_REQUEST_SHAPES, raw)).toBeNull();
      expect(shapeProblem(CLI_REQUEST_SHAPES.body, r.rawBody as JsonValue)).toBeNull();
    }
  });
});
