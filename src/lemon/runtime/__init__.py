"""Execute specs: async DAG executor, node cache, budgets, orchestration traces."""

from lemon.runtime.budget import Budget
from lemon.runtime.executor import Executor, RunResult, derive_seed, majority_vote, required_agents
from lemon.runtime.node_cache import NodeCache, NodeOutput
from lemon.runtime.trace import Trace

__all__ = ["Budget", "Executor", "NodeCache", "NodeOutput", "RunResult", "Trace", "derive_seed",
           "majority_vote", "required_agents"]
