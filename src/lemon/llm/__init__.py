"""Model backends behind one seam, the persistent request cache, and capacity pools."""
