"""Execute specs: async DAG executor, node cache, budgets, orchestration traces."""

from lemon.runtime.budget import Budget
from lemon.runtime.executor import Executor, RunResult, VoteKey, derive_seed, majority_vote, required_agents
from lemon.runtime.node_cache import NodeCache, NodeOutput
from lemon.runtime.trace import AgentTokens, StopDecision, Trace, TraceEdge, TraceEvent

__all__ = ["AgentTokens", "Budget", "Executor", "NodeCache", "NodeOutput", "RunResult", "StopDecision", "Trace",
           "TraceEdge", "TraceEvent", "VoteKey", "derive_seed", "majority_vote", "required_agents"]
