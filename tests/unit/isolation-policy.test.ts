import { describe, expect, it } from "vitest";
import { DEFAULT_EGRESS_ALLOW, EgressRefusal, embeddedIpv4, isPublicAddress, normalizeHost, parseEgressAllow, systemResolver } from "../../src/isolation/policy.ts";
import { UsageError } from "../../src/util/errors.ts";

describe("parseEgressAllow (--egress-allow)", () => {
  it("splits commas, repeats, normalizes case and a trailing dot, and drops duplicates", () => {
    expect(parseEgressAllow(["API.Anthropic.com.,platform.claude.com", " api.anthropic.com ", "example.org"])).toEqual(["api.anthropic.com", "platform.claude.com", "example.org"]);
  });

  it("refuses IP literals, wildcards, ports, schemes and an empty list, naming each entry", () => {
    for (const bad of ["1.2.3.4", "[::1]", "::1", "*.anthropic.com", "api.anthropic.com:443", "https://api.anthropic.com", "a b"]) {
      expect(() => parseEgressAllow([bad]), bad).toThrow(UsageError);
    }
    try {
      parseEgressAllow(["127.0.0.1,*.example.com"]);
      expect.unreachable();
    } catch (err) {
      expect((err as UsageError).problems).toHaveLength(2);
      expect((err as UsageError).problems[0]).toMatch(/127\.0\.0\.1: an IP address/);
    }
    expect(() => parseEgressAllow([" , "])).toThrow(/names no host/);
  });

  it("the default allowlist is the API and the OAuth refresh host, both valid names", () => {
    expect(DEFAULT_EGRESS_ALLOW).toEqual(["api.anthropic.com", "platform.claude.com"]);
    expect(parseEgressAllow([DEFAULT_EGRESS_ALLOW.join(",")])).toEqual([...DEFAULT_EGRESS_ALLOW]);
    expect(normalizeHost("Platform.Claude.COM.")).toBe("platform.claude.com");
  });
});

describe("isPublicAddress", () => {
  it("refuses loopback, private, link-local, shared, reserved and multicast ranges of both families", () => {
    for (const a of [
      "127.0.0.1",
      "127.255.0.9",
      "10.1.2.3",
      "172.16.0.1",
      "172.31.255.255",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "0.0.0.0",
      "192.0.2.1",
      "198.18.0.1",
      "224.0.0.1",
      "255.255.255.255",
      "::",
      "::1",
      "fc00::1",
      "fd12::1",
      "fe80::1",
      "ff02::1",
      "::ffff:127.0.0.1",
      "::ffff:10.0.0.1",
      "64:ff9b::a00:1",
      "2001:db8::1",
      "2002:a00:1::",
      "not-an-address",
      "",
    ]) {
      expect(isPublicAddress(a), a).toBe(false);
    }
  });

  it("accepts public unicast addresses, mapped ones included", () => {
    for (const a of ["160.79.104.10", "8.8.8.8", "172.32.0.1", "2607:6bc0::10", "2606:4700::1111", "::ffff:8.8.8.8"]) {
      expect(isPublicAddress(a), a).toBe(true);
    }
  });

  it("judges IPv4-compatible (::/96), mapped, translated, NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses by the IPv4 address they embed", () => {
    const inner = [
      "::127.0.0.1",
      "::7f00:1",
      "::10.0.0.1",
      "::a00:1",
      "0:0:0:0:0:0:c0a8:101",
      "::169.254.169.254",
      "::ffff:7f00:1",
      "::ffff:0:10.1.2.3",
      "64:ff9b::127.0.0.1",
      "64:ff9b::a9fe:a9fe",
      "64:ff9b::0a00:0001",
      "2002:7f00:1::",
      "2002:c0a8:101::1",
      "2002:a9fe:a9fe:1:2:3:4:5",
      "::1",
      "::",
      "::127.0.0.1%lo",
    ];
    for (const a of inner) expect(isPublicAddress(a), a).toBe(false);
    const outer = ["::8.8.8.8", "::808:808", "64:ff9b::8.8.8.8", "64:ff9b::a04f:680a", "2002:808:808::1", "::ffff:0:8.8.8.8"];
    for (const a of outer) expect(isPublicAddress(a), a).toBe(true);
    expect(embeddedIpv4("::7f00:1")).toBe("127.0.0.1");
    expect(embeddedIpv4("64:ff9b::a04f:680a")).toBe("160.79.104.10");
    expect(embeddedIpv4("2002:c0a8:101::1")).toBe("192.168.1.1");
    expect(embeddedIpv4("2607:6bc0::10")).toBeUndefined();
    // Outside the NAT64 /96 and the other forms, the IPv6 ranges still decide.
    for (const a of ["64:ff9b:1::a00:1", "2001::a00:1", "fe80::a00:1"]) expect(isPublicAddress(a), a).toBe(false);
  });
});

describe("systemResolver", () => {
  const fixed = (answers: string[]) => async () => answers.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));

  it("dials the first answer on the requested port when every answer is public", async () => {
    const resolve = systemResolver(fixed(["160.79.104.10", "2607:6bc0::10"]));
    expect(await resolve("api.anthropic.com", 443)).toEqual({ address: "160.79.104.10", port: 443 });
  });

  it("refuses, by policy, a name with any non-public answer (a resolver pointing into the host's network)", async () => {
    const resolve = systemResolver(fixed(["160.79.104.10", "127.0.0.1"]));
    await expect(resolve("api.anthropic.com", 443)).rejects.toBeInstanceOf(EgressRefusal);
    await expect(systemResolver(fixed(["10.0.0.5"]))("api.anthropic.com", 443)).rejects.toThrow(/10\.0\.0\.5, which is not a public address/);
  });

  it("a name without answers is a failure, not a refusal", async () => {
    const err = await systemResolver(fixed([]))("api.anthropic.com", 443).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(EgressRefusal);
  });
});
