import { describe, expect, it } from "vitest";
import { maskedFolders } from "../support/second-engine.ts";

describe("the second engine's hidden folders", () => {
  it("hides a checkout under the temporary folder with that folder, not by a second mount that would fail", () => {
    expect(maskedFolders({ tmp: "/tmp", home: "/root", projectRoot: "/tmp/ci/clone" })).toEqual(["/tmp", "/root", "/home"]);
    expect(maskedFolders({ tmp: "/tmp", home: "/home/ci", projectRoot: "/home/ci/src/study-runner" })).toEqual(["/tmp", "/home"]);
  });

  it("keeps every folder when none holds another", () => {
    expect(maskedFolders({ tmp: "/var/tmp", home: "/root", projectRoot: "/work/main" })).toEqual(["/var/tmp", "/root", "/home", "/work"]);
  });
});
