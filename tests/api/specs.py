"""The spec the API tests run: three voters and a vote that stops once two agree."""

VOTE = """agents:
  - {name: solver, role: math_solver, capacity: large}
  - {name: solver_2, role: math_solver, capacity: large}
  - {name: solver_3, role: math_solver, capacity: large}
  - {name: vote, role: majority_vote, capacity: large, depends_on: [solver, solver_2, solver_3], stop: {agree: 2}}
"""
