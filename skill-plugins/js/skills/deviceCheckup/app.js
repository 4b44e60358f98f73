// `deviceCheckup`: every smart device of the customer looked at, and those
// that are offline or report an error diagnosed (written in JavaScript,
// against the same contract as the Rust skills).

import { callTool, defineSkill, log } from './skillhost_skill.js';

const INSTRUCTIONS = `You check the customer's Bit Home devices.

1. Use \`list_devices\` to list the customer's devices.
2. For each device that is offline or reports an error, use \`diagnose_device\` with the device's id and, as the symptom, the error it reports (or that it is offline).
3. Answer with the devices that need attention, what each reports, the likely causes and the steps to try, then name the devices that are fine.

Never open a ticket or an after-sale request: this is a checkup only.`;

// What a device that needs attention shows, as a symptom to diagnose.
function symptomOf(device) {
  if (device.error) {
    return device.error;
  }
  return 'offline: does not respond in the Bit Home app';
}

export const { manifest, instructions, run } = defineSkill({
  name: 'deviceCheckup',
  version: '0.1.0',
  description:
    "Checks all of the customer's smart devices at once: lists them, and for each one that is " +
    'offline or reports an error, diagnoses it (likely causes and steps to try). Read-only: ' +
    'call it when the customer asks whether their devices are fine, or reports a device ' +
    'problem without saying which device.',
  tools: ['list_devices', 'diagnose_device'],
  instructions: INSTRUCTIONS,
  testCases: [
    {
      name: 'the seeded vacuum reports E05 and the plug is offline',
      input: {},
      expectTools: ['list_devices', 'diagnose_device'],
      expectContains: ['E05', 'Bedroom plug'],
    },
  ],
  steps() {
    const { devices } = callTool('list_devices', {});
    const attention = [];
    const fine = [];
    for (const device of devices) {
      if (device.online && !device.error) {
        fine.push(device.nickname);
        continue;
      }
      const symptom = symptomOf(device);
      const diagnosis = callTool('diagnose_device', { device: device.device_id, symptom });
      attention.push({
        device_id: device.device_id,
        nickname: device.nickname,
        product: device.product,
        findings: diagnosis.findings,
        likely_causes: diagnosis.likely_causes,
      });
    }
    log.info(`${devices.length} device(s), ${attention.length} needing attention`);
    const needing = attention.map((device) => `${device.nickname} (${device.findings.join('; ')})`);
    const message =
      attention.length === 0
        ? `All ${devices.length} device(s) are online and report no error.`
        : `${attention.length} of ${devices.length} device(s) need attention: ${needing.join(', ')}.`;
    return { devices_checked: devices.length, attention, fine, message };
  },
});
