// skillhost's guest SDK for skills written in JavaScript, built into
// components by componentize-js (which bundles SpiderMonkey).
//
// A skill module describes the skill once and exports what `defineSkill`
// returns:
//
//   import { defineSkill, callTool, handover, log } from './skillhost_skill.js';
//
//   export const { manifest, instructions, run } = defineSkill({
//     name: 'deviceCheckup',              // the function name the LLM calls
//     version: '0.1.0',
//     description: 'Checks every device of the customer.',
//     tools: ['list_devices'],            // the only tools it may call
//     instructions: 'Use list_devices, then …',
//     testCases: [{ name: 'seeded devices', input: {}, expectContains: ['E05'] }],
//     steps(input) {                      // a JSON value, already checked
//       const { devices } = callTool('list_devices', {});
//       return { count: devices.length }; // the final result, as JSON
//     },
//   });
//
// The steps return the final result (any JSON value), or `handover(note)`
// to let the LLM-driven path finish with the skill's instructions. An
// exception they throw fails the invocation with its text (the stack goes
// to the host's log), as `Err(message)` does in Rust. At run time a skill
// has no files, network or environment.

import { callTool as hostCallTool, log as hostLog } from 'skillhost:skill/host@0.1.0';

// Why a tool call failed: `kind` is the WIT `tool-error-kind`
// (`not-permitted`, `unknown-tool`, `invalid-arguments`, `rejected`,
// `declined`, `limit-exceeded`, `failed`), `detail` the host's message,
// naming the offending field where there is one.
export class ToolError extends Error {
  constructor(tool, kind, detail) {
    super(`${tool} (${kind}): ${detail}`);
    this.name = 'ToolError';
    this.tool = tool;
    this.kind = kind;
    this.detail = detail;
  }
}

// Calls the tool `name` with `args` and returns its result as a JSON value.
// Only the tools the manifest declares run; every call counts against the
// invocation's tool-call budget. Throws `ToolError`.
export function callTool(name, args) {
  let result;
  try {
    result = hostCallTool(name, JSON.stringify(args));
  } catch (error) {
    // componentize-js throws the `err` of a WIT result as its `payload`.
    if (error?.payload) {
      throw new ToolError(name, error.payload.kind, error.payload.message);
    }
    throw error;
  }
  return JSON.parse(result);
}

// The host's log, one line per call, under the skill's name:
// `log.info(`order ${orderId} found`)`.
export const log = Object.fromEntries(
  ['trace', 'debug', 'info', 'warn', 'error'].map((level) => [
    level,
    (message) => hostLog(level, String(message)),
  ]),
);

class Handover {
  constructor(note) {
    this.note = note;
  }
}

// Steps that cannot finish alone: the LLM-driven path continues with the
// skill's instructions and this note (what was done, what is left).
export function handover(note) {
  return new Handover(note);
}

// The three exports of the skill world from one description. `hasSteps`
// is not set by hand: it is true exactly when `steps` is given.
export function defineSkill({
  name,
  version,
  description,
  // Like the Rust SDK's default: an object that takes no input.
  parameters = { type: 'object', properties: {}, additionalProperties: false },
  tools = [],
  unlocks = [],
  instructions = '',
  testCases = [],
  steps,
}) {
  const manifest = {
    name,
    version,
    description,
    parameters: JSON.stringify(parameters),
    tools,
    unlocks,
    hasSteps: steps !== undefined,
    testCases: testCases.map((testCase) => ({
      name: testCase.name,
      input: JSON.stringify(testCase.input),
      expectTools: testCase.expectTools ?? [],
      expectContains: testCase.expectContains ?? [],
    })),
  };
  return {
    manifest: () => manifest,
    instructions: () => instructions,
    run(input) {
      if (steps === undefined) {
        // The manifest says has-steps = false, so the host never calls
        // this; answer anyway rather than trap.
        throw `skill ${name} has no deterministic steps`;
      }
      try {
        const outcome = steps(JSON.parse(input));
        if (outcome instanceof Handover) {
          return { tag: 'handover', val: outcome.note };
        }
        return { tag: 'done', val: JSON.stringify(outcome ?? null) };
      } catch (error) {
        // An uncaught exception would trap the instance, and the caller
        // would see a trap instead of what went wrong.
        log.error(error?.stack ? `${error}\n${error.stack}` : String(error));
        throw error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      }
    },
  };
}
