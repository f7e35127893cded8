// Runs one operation twice against an opreg server: node quickstart.mjs 127.0.0.1:50051
import { OpregClient, VERSION } from "@opreg/client";

const opreg = new OpregClient(process.argv[2] ?? "127.0.0.1:50051");
const key = `payout:quickstart-${Date.now()}`;
const pay = async (lease) => `paid 100 under fencing token ${lease.fencingToken}`;
const first = await opreg.runOnce("quickstart", key, { account: "A", amount: 100 }, pay);
const again = await opreg.runOnce("quickstart", key, { account: "A", amount: 100 }, pay); // replayed, not run
console.log(`@opreg/client ${VERSION}: ${first.text} (replayed: ${first.replayed}); again: replayed: ${again.replayed}`);
opreg.close();
