// `jsFaults`: a JavaScript guest that goes wrong in the way its input asks,
// for the tests of the JavaScript SDK and of the sandbox around an engine.

import { ToolError, callTool, defineSkill, handover, log } from './skillhost_skill.js';

const skill = defineSkill({
  name: 'jsFaults',
  version: '0.1.0',
  description:
    'Goes wrong as asked: throws, calls an undeclared tool, loops, hoards memory; or refunds ' +
    'with a reason made of random bytes and the time.',
  parameters: {
    type: 'object',
    properties: { fault: { type: 'string' }, orderId: { type: 'string' } },
    required: ['fault'],
  },
  tools: ['queryOrder', 'applyRefund'],
  steps({ fault, orderId }) {
    switch (fault) {
      case 'raise':
        throw new Error('the steps gave up');
      case 'undeclared':
        // Not caught: the ToolError ends the run.
        return callTool('cancel_order', { order_id: '88239' });
      case 'caught':
        try {
          callTool('queryOrder', { orderId });
        } catch (error) {
          if (error instanceof ToolError) {
            return { tool: error.tool, kind: error.kind, message: error.detail };
          }
          throw error;
        }
        return { found: true };
      case 'refund': {
        // What differs on every run, unless the host hands the steps run
        // again after an approval what it handed the first attempt.
        const bytes = crypto.getRandomValues(new Uint8Array(8));
        const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('');
        const reason = `request ${hex} at ${Date.now()}`;
        const refund = callTool('applyRefund', { orderId, reason });
        return { refund, reason };
      }
      case 'unserializable':
        return { ids: 1n };
      case 'handover':
        return handover('the customer must choose');
      case 'print':
        console.log('printed to stdout');
        log.warn('logged at warn');
        return { printed: true };
      case 'loop':
        for (;;) {}
      case 'hoard': {
        const hoard = [];
        for (;;) {
          hoard.push(new Uint8Array(1 << 20).fill(1));
        }
      }
      default:
        throw new Error(`no fault named ${fault}`);
    }
  },
});

export const { manifest, instructions } = skill;

// What a guest written without the SDK does: componentize-js takes what
// `run` throws as its result's error, which must be a string, so an Error
// traps (saying why on stderr).
export function run(input) {
  if (JSON.parse(input).fault === 'uncaught') {
    throw new Error('nothing caught this');
  }
  return skill.run(input);
}
