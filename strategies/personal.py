"""Per-client (personal) entries on the server: filled from the model sent, never changed.

The clients' replies leave their personal entries out (fedpfn.core.personal), and the batched
engine's totals carry the sent values there. Whatever the inner strategy and the other parts
make of them (an average of equal values rounds; a server optimizer may keep a step), the new
global model holds the values it sent, bit for bit: the clients never train them, so the
global model's copy is only the start of a client's first round.
"""

from __future__ import annotations

from flwr.app import RecordDict

from fedpfn.core.personal import left_out
from fedpfn.core.protocol import ARRAYS, Arrays, to_array_record, to_numpy, unpack
from strategies.parts import ServerPart
from strategies.totals import RoundTotals


class PersonalServer(ServerPart):
    def restore(self, server_round: int, replies: list[RecordDict], sent: Arrays) -> None:
        """Replies with the personal entries as sent (update records: zeros there)."""
        mask = left_out(self.ctx.personal, sent)
        for content in replies:
            for key, record in list(content.array_records.items()):
                reference = sent if key == ARRAYS else None
                content[key] = to_array_record(unpack(to_numpy(record), mask, reference))

    def adjust(self, server_round: int, params: Arrays, sent: Arrays, totals: RoundTotals) -> Arrays:
        return {name: sent[name] if name in self.ctx.personal else value for name, value in params.items()}
