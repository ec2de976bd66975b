import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DockerRuntime, engineTlsProblem } from "../../src/sandbox/docker.ts";

/** How the runner reads the docker CLI's TLS variables before it builds its engine client. */

let certs: string;
beforeAll(async () => {
  certs = await mkdtemp(join(tmpdir(), "sr-tls-env-"));
  for (const f of ["ca.pem", "cert.pem"]) await writeFile(join(certs, f), "not checked here\n", { mode: 0o600 });
});
afterAll(() => rm(certs, { recursive: true, force: true }));

describe("the engine's TLS variables", () => {
  // contract: R250
  it("names DOCKER_CERT_PATH and what it must hold when the variables cannot reach a TLS engine, and stays out of the way otherwise", async () => {
    const host = "tcp://127.0.0.1:2376";
    expect(engineTlsProblem({})).toBeUndefined();
    expect(engineTlsProblem({ DOCKER_HOST: "unix:///run/docker.sock", DOCKER_TLS_VERIFY: "1" })).toBeUndefined();
    expect(engineTlsProblem({ DOCKER_HOST: host })).toBeUndefined();
    expect(engineTlsProblem({ DOCKER_HOST: host, DOCKER_TLS_VERIFY: "1" })).toMatch(
      /^DOCKER_TLS_VERIFY=1 asks for TLS to the engine at tcp:\/\/127\.0\.0\.1:2376, but DOCKER_CERT_PATH is not set; set DOCKER_CERT_PATH to the folder holding ca\.pem/,
    );
    // An escape sequence in the variable is shown escaped, never sent to the terminal.
    expect(engineTlsProblem({ DOCKER_HOST: host, DOCKER_TLS_VERIFY: "yes\u001b[2J" })).toBe(
      "DOCKER_TLS_VERIFY=yes\\u001b[2J is not understood; set DOCKER_TLS_VERIFY=1 for TLS to the engine at tcp://127.0.0.1:2376, or unset it",
    );
    expect(engineTlsProblem({ DOCKER_HOST: host, DOCKER_TLS_VERIFY: "1", DOCKER_CERT_PATH: certs })).toBe(
      `DOCKER_CERT_PATH=${certs} has no readable key.pem; set DOCKER_CERT_PATH to the folder holding ca.pem (the CA that signed the engine's certificate), cert.pem and key.pem (a client certificate that CA signed)`,
    );
    await writeFile(join(certs, "key.pem"), "not checked here\n", { mode: 0o600 });
    expect(engineTlsProblem({ DOCKER_HOST: host, DOCKER_TLS_VERIFY: "1", DOCKER_CERT_PATH: certs })).toBeUndefined();
    // The client is never built on variables that cannot work: a refusal, not docker-modem's ENOENT.
    const saved = { ...process.env };
    try {
      Object.assign(process.env, { DOCKER_HOST: host, DOCKER_TLS_VERIFY: "1", DOCKER_CERT_PATH: join(certs, "missing") });
      expect(() => new DockerRuntime()).toThrow(/the Docker engine cannot be reached: DOCKER_CERT_PATH=\S+missing has no readable ca\.pem, cert\.pem, key\.pem; .*nothing was charged/);
    } finally {
      for (const k of ["DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"]) {
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
      }
    }
  });
});
