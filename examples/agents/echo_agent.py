#!/usr/bin/env python3
"""An external agent for an IoA node, in Python with the standard library only.

It speaks the local agent protocol ioa-agent/1 (spec/node-agents.md): JSON
objects, one per line, on stdin (from the node) and stdout (to the node);
diagnostics go to stderr. Skills:

  text.upper   progress, then the upper-cased text (options.prefix in front)
  text.slow    waits input.seconds (default 60) unless canceled
  text.relay   asks another agent for input.skill on behalf of its task

Run it from a node config:

  {"agents": [{"key": "echo", "name": "Echo", "skills": [],
               "command": ["python3", "./agents/echo_agent.py"],
               "options": {"prefix": ">"}}]}
"""
import json
import os
import sys
import threading

OPTIONS = json.loads(os.environ.get("IOA_AGENT_OPTIONS") or "{}")
_out = threading.Lock()
_canceled = {}          # task id -> threading.Event
_calls = {}             # call id -> task id


def send(msg):
    line = json.dumps(msg, separators=(",", ":"))
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def upper(task, inp):
    send({"type": "progress", "task": task, "message": "upper-casing"})
    text = str(inp.get("text", ""))
    if not text:
        send({"type": "error", "task": task, "code": "EMPTY_TEXT", "message": "nothing to upper-case"})
        return
    send({"type": "result", "task": task, "output": {"text": OPTIONS.get("prefix", "") + text.upper()}})


def slow(task, inp):
    send({"type": "progress", "task": task, "message": "started"})
    if not _canceled[task].wait(float(inp.get("seconds", 60))):
        send({"type": "result", "task": task, "output": "slept"})


def relay(task, inp):
    call_id = "call-" + task
    _calls[call_id] = task
    send({"type": "call", "id": call_id, "skill": inp["skill"], "input": {"text": inp.get("text", "")}, "task": task})


SKILLS = {"text.upper": upper, "text.slow": slow, "text.relay": relay}


def run(msg):
    task = msg["task"]
    try:
        SKILLS[msg["skill"]](task, msg.get("input") or {})
    except Exception as err:  # a bug in a skill fails its task, not the agent
        send({"type": "error", "task": task, "code": "AGENT_BUG", "message": str(err)[:500]})
    finally:
        _canceled.pop(task, None)


def main():
    send({
        "type": "hello",
        "protocol": "ioa-agent/1",
        "name": "Echo (Python)",
        "skills": [{"id": s} for s in SKILLS],
    })
    for line in sys.stdin:  # one message per line; ends when the node closes stdin
        if not line.strip():
            continue
        msg = json.loads(line)
        kind = msg.get("type")
        if kind == "welcome":
            print("hosted as " + msg["agent"]["did"], file=sys.stderr, flush=True)
        elif kind == "task":
            _canceled[msg["task"]] = threading.Event()
            threading.Thread(target=run, args=(msg,), daemon=True).start()
        elif kind == "cancel":
            _canceled.get(msg["task"], threading.Event()).set()
        elif kind in ("call-result", "call-error"):
            task = _calls.pop(msg["id"], None)
            if task is None:
                continue
            if kind == "call-result":
                send({"type": "result", "task": task, "output": {"relayed": msg["output"]}})
            else:
                send({"type": "error", "task": task, "code": msg["code"], "message": msg["message"]})
        elif kind == "shutdown":
            break


if __name__ == "__main__":
    main()
