"""KillingConnector: kvshare's connector, unchanged, in an engine that is
killed -9 at a chosen point of its first save (test_engine.py's kill cases).
vLLM loads it with kv_connector="KillingConnector",
kv_connector_module_path="killing_connector" (tests/vllm on PYTHONPATH), and
kv_connector_extra_config["test_kill_at"] says where the rank's process
SIGKILLs itself:
  "layer"   right after the first layer's dump of a step with saves was
            submitted: the blocks being stored never get their other layers;
  "cached"  right after wait_for_save found that step's dumps in the shared
            cache: every block is complete there, its backend write not done
            (the test delays the backend's writes)."""
import os
import signal

from kvshare.vllm import KVShareConnector


class KillingConnector(KVShareConnector):

    def _kill_at(self):
        return self._vllm_config.kv_transfer_config.kv_connector_extra_config.get(
            "test_kill_at")

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        super().save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)
        if self._kill_at() == "layer" and self._saving:
            os.kill(os.getpid(), signal.SIGKILL)

    def wait_for_save(self):
        saving = bool(self._saving)
        super().wait_for_save()
        if self._kill_at() == "cached" and saving:
            os.kill(os.getpid(), signal.SIGKILL)
