import { describe, expect, it } from "vitest";
import { checkApiKey, DEFAULT_API_BASE_URL, parseApiBaseUrl, redactDeep, redactSecret } from "../../src/transport/http/client.ts";
import { UsageError } from "../../src/util/errors.ts";

describe("--api-base-url", () => {
  it("defaults to the real API and accepts only it or a loopback port", () => {
    expect(parseApiBaseUrl(undefined)).toBe(DEFAULT_API_BASE_URL);
    expect(parseApiBaseUrl("https://api.anthropic.com")).toBe("https://api.anthropic.com");
    expect(parseApiBaseUrl("https://api.anthropic.com/")).toBe("https://api.anthropic.com");
    expect(parseApiBaseUrl("http://127.0.0.1:4010")).toBe("http://127.0.0.1:4010");
    expect(parseApiBaseUrl("http://localhost:4010/")).toBe("http://localhost:4010");
  });

  it.each([
    "http://api.anthropic.com",
    "https://api.anthropic.com:8443",
    "https://api.anthropic.com/v1",
    "https://evil.example",
    "https://api.anthropic.com.evil.example",
    "http://127.0.0.1",
    "http://10.0.0.1:4010",
    "http://[::1]:4010",
    "https://127.0.0.1:4010",
    "http://user:pw@127.0.0.1:4010",
    "http://127.0.0.1:4010/?x=1",
    "ftp://127.0.0.1:4010",
    "not a url",
  ])("refuses %s", (value) => {
    expect(() => parseApiBaseUrl(value)).toThrow(UsageError);
  });
});

describe("the API key", () => {
  it("accepts visible ASCII only and never quotes the value in the problem", () => {
    expect(checkApiKey("sk-ant-api03-abc_DEF-123")).toBeUndefined();
    for (const bad of ["", "sk-ant\r\nX-Evil: 1", "sk-ant\nx", "sk ant", "sk-ant-é", "sk-ant\u0000"]) {
      const problem = checkApiKey(bad);
      expect(problem, JSON.stringify(bad)).toMatch(/^ANTHROPIC_API_KEY /);
      if (bad.length > 3) expect(problem).not.toContain(bad);
    }
  });

  it("is redacted as written and as it reads inside a JSON string, in strings, arrays and object keys", () => {
    const key = 'sk-"odd\\key';
    const json = JSON.stringify({ message: `bad key ${key}` });
    expect(json).not.toContain(key);
    expect(redactSecret(json, key)).toBe('{"message":"bad key [redacted]"}');
    expect(redactSecret(`a ${key} b ${key}`, key)).toBe("a [redacted] b [redacted]");
    const deep = redactDeep({ a: [`x${key}`, 1, null, { [key]: true }], b: "plain" }, key);
    expect(deep).toEqual({ a: ["x[redacted]", 1, null, { "[redacted]": true }], b: "plain" });
    expect(JSON.stringify(deep)).not.toContain("odd");
  });
});
