import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * A throw-away certificate authority and a server certificate for 127.0.0.1, made with the
 * machine's openssl for one test run or one `demo --real-cli`: the scripted API serves TLS on
 * loopback with it and the gateway trusts this CA alone, so the gateway's TLS verification is
 * exercised without any network. Valid two days; nothing here is a credential. With `client`, it
 * also signs a client certificate, as a Docker engine's `--tlsverify` asks of its callers.
 */
export interface TestCa {
  ca: string;
  key: string;
  cert: string;
  /** A client certificate of the same CA, when asked for. */
  client?: { key: string; cert: string };
}

export function makeTestCa(opts: { client?: boolean } = {}): TestCa {
  const dir = mkdtempSync(join(tmpdir(), "sr-test-ca-"));
  const run = (args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
  try {
    run(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=study-runner test CA"]);
    run(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]);
    writeFileSync(join(dir, "ext.cnf"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n");
    run(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf"]);
    const ca: TestCa = { ca: readFileSync(join(dir, "ca.pem"), "utf8"), key: readFileSync(join(dir, "server.key"), "utf8"), cert: readFileSync(join(dir, "server.pem"), "utf8") };
    if (!opts.client) return ca;
    run(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=study-runner test client"]);
    writeFileSync(join(dir, "client.cnf"), "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n");
    run(["x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "client.pem", "-days", "2", "-extfile", "client.cnf"]);
    return { ...ca, client: { key: readFileSync(join(dir, "client.key"), "utf8"), cert: readFileSync(join(dir, "client.pem"), "utf8") } };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
