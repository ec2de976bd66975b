/**
 * dockerode, loaded without the two parts of it no runner command starts with. At its load
 * dockerode 5 requires its BuildKit session (`lib/session.js`: gRPC and a protobuf loader, used
 * only by `buildImage` with `version: "2"`, which the runner never asks for), and docker-modem its
 * SSH transport (`lib/ssh.js`: ssh2, used only when DOCKER_HOST is `ssh://`). Measured here, they
 * are about three quarters of the 100 ms that requiring dockerode takes, in every runner command
 * that reaches the engine (docs/performance.md, "The test suite").
 *
 * Each of the two is a module exporting one function. Before dockerode is required, each is put
 * in Node's module cache as a stand-in function that requires the real module at its first call
 * and hands every call on to it, so an `ssh://` engine or a BuildKit build works as before and
 * pays the load only then. A layout of the packages where either file is missing (another
 * version) leaves that one loaded as usual.
 */
import { createRequire, Module } from "node:module";
import type Docker from "dockerode";

const require = createRequire(import.meta.url);

/** The modules deferred, resolved as dockerode and docker-modem require them. */
function deferredModulePaths(): string[] {
  const paths: string[] = [];
  const tryResolve = (from: NodeRequire, request: string): void => {
    try {
      paths.push(from.resolve(request));
    } catch {
      // Another layout: loaded as usual.
    }
  };
  const dockerode = require.resolve("dockerode");
  const fromDockerode = createRequire(dockerode);
  tryResolve(fromDockerode, "./session.js");
  tryResolve(createRequire(fromDockerode.resolve("docker-modem")), "./ssh.js");
  return paths;
}

function defer(path: string): void {
  if (require.cache[path]) return;
  const standIn = new Module(path);
  standIn.filename = path;
  standIn.loaded = true;
  let real: ((...args: unknown[]) => unknown) | undefined;
  standIn.exports = function deferred(this: unknown, ...args: unknown[]): unknown {
    if (!real) {
      if (require.cache[path] === standIn) delete require.cache[path];
      real = require(path) as (...args: unknown[]) => unknown;
    }
    return real.apply(this, args);
  };
  require.cache[path] = standIn;
}

let loaded: typeof Docker | undefined;

/** The dockerode constructor, its session and SSH modules deferred to their first use. */
export function loadDockerode(): typeof Docker {
  if (!loaded) {
    for (const path of deferredModulePaths()) defer(path);
    loaded = require("dockerode") as typeof Docker;
  }
  return loaded;
}
