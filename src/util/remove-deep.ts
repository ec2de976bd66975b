import { chmodSync, closeSync, constants, lstatSync, openSync, readdirSync, rmdirSync, unlinkSync } from "node:fs";

/**
 * Removes the folder `dir` and everything in it, however deep: every operation names its target
 * relative to an open directory handle (`/proc/self/fd/<fd>/<name>`), so no path the kernel is
 * given is longer than a few dozen bytes, even where the full path is far over PATH_MAX (a
 * corpus path of 4,077 bytes under an export folder). One handle is open at a time: it walks
 * down by opening a child through its parent's handle and back up through `..`. Folders are made
 * writable (0700) before they are emptied; symlinks are removed, never followed. Linux only
 * (it needs /proc); elsewhere it throws and the caller keeps its own error.
 */
export function removeDeep(dir: string): void {
  if (process.platform !== "linux") throw new Error(`removing ${dir} relative to open directory handles needs Linux's /proc`);
  const DIR = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
  const at = (fd: number, name?: string) => (name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`);
  let fd = openSync(dir, DIR);
  const names: string[] = [];
  try {
    for (;;) {
      chmodSync(at(fd), 0o700);
      let child: string | undefined;
      for (const name of readdirSync(at(fd))) {
        if (lstatSync(at(fd, name)).isDirectory()) {
          child = name;
          break;
        }
        unlinkSync(at(fd, name));
      }
      if (child !== undefined) {
        const next = openSync(at(fd, child), DIR);
        closeSync(fd);
        fd = next;
        names.push(child);
        continue;
      }
      // This folder is empty: go up and remove it, or stop at the top.
      const name = names.pop();
      if (name === undefined) break;
      const parent = openSync(at(fd, ".."), DIR);
      closeSync(fd);
      fd = parent;
      rmdirSync(at(fd, name));
    }
  } finally {
    closeSync(fd);
  }
  rmdirSync(dir);
}
