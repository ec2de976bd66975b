/**
 * A runner that is killed while its attempt runs (tests/integration/engine-api-export-volume.test.ts):
 * the run kinds' provider on the engine-api channel prepares one sandbox of an export, starts a
 * program that never ends, says `running`, and waits to be killed. Arguments: the image, the run
 * id, the export folder and its export hash.
 */
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { dockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import { treeFromFolder } from "../../src/sandbox/tree.ts";
import { nodeScriptSpec } from "./node-sandbox.ts";

const [image, run, folder, hash] = process.argv.slice(2) as [string, string, string, string];
const sandbox = dockerSandbox(new DockerRuntime(), "engine-api");
const prepared = await sandbox.prepare(nodeScriptSpec(image, sandbox.ownerLabels(run, "0"), "setTimeout(() => {}, 3600e3)", { workspace: treeFromFolder("/workspace", folder, hash) }));
const streams = await prepared.run();
streams.stdout.resume();
streams.stderr.resume();
process.stdout.write("running\n");
setInterval(() => {}, 3600e3);
