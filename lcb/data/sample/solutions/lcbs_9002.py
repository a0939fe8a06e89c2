class Solution:
    def isAlternating(self, s: str) -> bool:
        return "00" not in s and "11" not in s
