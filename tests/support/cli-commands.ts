import type { Command } from "commander";

/** Every command that runs an action: its words on the command line and the command. */
export function leafCommands(program: Command): [string, Command][] {
  const out: [string, Command][] = [];
  const walk = (c: Command, words: string[]) => {
    if (c.commands.length === 0 && words.length) out.push([words.join(" "), c]);
    for (const sub of c.commands) walk(sub, [...words, sub.name()]);
  };
  walk(program, []);
  return out;
}
